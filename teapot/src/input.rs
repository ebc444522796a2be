//! Reading the files `teapot validate` is given: a path, or `-` for
//! standard input, with the label its messages name.

use std::path::Path;

use anyhow::Context;

pub(crate) fn read_input(file: &Path) -> anyhow::Result<(String, String)> {
    if file == Path::new("-") {
        let text = std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?;
        return Ok(("-".into(), text));
    }
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    Ok((file.display().to_string(), text))
}
