//! A manifest file's YAML documents found by their markers, without
//! parsing them: what lets a rewritten file of EndpointSlices be parsed
//! only where it changed ([`crate::manifests::read_slice_files`]).
//!
//! A file of a namespace's EndpointSlices is rewritten whole when one of
//! them changes, and parsing its every document again cost about 30 µs a
//! slice: most of the CPU of an endpoint change in manifests mode
//! (benches/route-table.md, "Endpoint changes in a Tenant world"). Each
//! document's text is hashed instead, and only the documents whose text
//! changed are parsed.
//!
//! YAML forbids a line starting with a document marker (`---` or `...`
//! followed by a blank or the line's end) inside any scalar, so such a
//! line always starts or ends a document. This reading is used only where
//! it cannot disagree with the parser: no directive (`%`), no document end
//! marker, no byte order mark, and the same number of documents as the
//! parser found in the same text (the caller checks that).

/// The text of each document of `text`, in the parser's order; `None`
/// where this reading might not agree with it (see the module).
pub(crate) fn split(text: &str) -> Option<Vec<&str>> {
    if text.starts_with('\u{feff}') {
        return None;
    }
    let mut documents = Vec::new();
    // Where the document being read starts, and whether it counts: text
    // before the first marker is a document only when it has content.
    let mut start = 0;
    let mut explicit = false;
    let mut content = false;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with('%') || is_marker(line, "...") {
            return None;
        }
        if is_marker(line, "---") {
            if explicit || content {
                documents.push(&text[start..at]);
            }
            start = at;
            explicit = true;
        } else if !content {
            let trimmed = line.trim_start();
            content = !trimmed.is_empty() && !trimmed.starts_with('#');
        }
        at += line.len();
    }
    if explicit || content || documents.is_empty() {
        // A stream without content is one empty document to the parser.
        documents.push(&text[start..]);
    }
    Some(documents)
}

/// Whether `line` is the marker `marker` (`---` or `...`): at its start,
/// followed by a blank or the line's end.
fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many documents serde_yaml reads in `text`, as the manifests
    /// reader reads them: up to the first that does not parse.
    fn parsed(text: &str) -> usize {
        let mut count = 0;
        for document in serde_yaml::Deserializer::from_str(text) {
            count += 1;
            if <serde_json::Value as serde::Deserialize>::deserialize(document).is_err() {
                break;
            }
        }
        count
    }

    #[test]
    fn documents_are_the_parsers() {
        for text in [
            "",
            "# only a comment\n",
            "a: 1\n",
            "a: 1\n---\nb: 2\n",
            "---\na: 1\n---\nb: 2\n",
            "# head\n---\na: 1\n",
            "a: 1\n---\n",
            "---\n---\na: 1\n",
            "--- {a: 1}\n--- # c\nb: |\n  ----\n  x\n",
            "a: |\n  text\n  --- not a marker when indented\n",
            "a: 1\r\n---\r\nb: 2\r\n",
            "a: 1\n----\n",
            "\n",
            "# c\n---\n# d\n",
        ] {
            let documents = split(text).expect(text);
            assert_eq!(documents.len(), parsed(text), "{text:?}: {documents:?}");
            // Each document parses alone as one.
            for d in &documents {
                assert_eq!(parsed(d), 1, "{text:?}: {d:?}");
            }
            // Back to back, to the end: only a head without content is left out.
            assert!(
                text.ends_with(&documents.concat()),
                "{text:?}: {documents:?}"
            );
        }
    }

    #[test]
    fn a_document_keeps_its_marker_and_its_text() {
        let text = "a: 1\n---\nb: 2\n--- {c: 3}\n";
        assert_eq!(
            split(text).unwrap(),
            vec!["a: 1\n", "---\nb: 2\n", "--- {c: 3}\n"]
        );
    }

    #[test]
    fn what_the_reading_might_get_wrong_is_left_to_the_parser() {
        for text in [
            "%YAML 1.2\n---\na: 1\n",
            "a: 1\n...\n---\nb: 2\n",
            "\u{feff}a: 1\n",
        ] {
            assert_eq!(split(text), None, "{text:?}");
        }
    }
}
