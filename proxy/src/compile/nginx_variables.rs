//! nginx variables in an annotation's value (`upstream-hash-by`,
//! `auth-cache-key`): literal text and `$name` / `${name}` pieces, read
//! once for every annotation that takes them, with their count bounded
//! before any is looked at. What a name means is each reader's own.

/// A piece of a value, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece<'v> {
    Text(&'v str),
    /// A variable's name, without `$` and braces.
    Variable(&'v str),
}

/// The pieces of `value` in order, or why it cannot be read: a `${`
/// without `}`, or more than `max_variables` variables.
pub(crate) fn pieces(value: &str, max_variables: usize) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut variables = 0;
    let mut rest = value;
    while !rest.is_empty() {
        let Some(at) = rest.find('$') else {
            out.push(Piece::Text(rest));
            break;
        };
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        rest = &rest[at + 1..];
        let (name, after) = match rest.strip_prefix('{') {
            Some(braced) => {
                let end = braced
                    .find('}')
                    .ok_or_else(|| format!("{value:?}: \"${{\" without \"}}\""))?;
                (&braced[..end], &braced[end + 1..])
            }
            None => {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        rest = after;
        variables += 1;
        if variables > max_variables {
            return Err(format!(
                "{value:?} names more than {max_variables} variables"
            ));
        }
        out.push(Piece::Variable(name));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_variables_in_order_within_the_bound() {
        assert_eq!(
            pieces("a$host-${http_x}b", 8).unwrap(),
            [
                Piece::Text("a"),
                Piece::Variable("host"),
                Piece::Text("-"),
                Piece::Variable("http_x"),
                Piece::Text("b"),
            ]
        );
        assert!(pieces("${host", 8).unwrap_err().contains("without"));
        // Counted as read: the ninth is refused before it is looked at.
        assert!(
            pieces(&"$a".repeat(9), 8)
                .unwrap_err()
                .contains("more than 8")
        );
        assert_eq!(pieces(&"$a".repeat(8), 8).unwrap().len(), 8);
    }
}
