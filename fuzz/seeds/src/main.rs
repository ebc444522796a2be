//! `write-seeds [DIR]`: writes `DIR/<target>/seed-NNN` (default `corpus`,
//! relative to `fuzz/`) for `cargo fuzz run`; libFuzzer keeps adding to
//! these directories.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("corpus"), PathBuf::from);
    match teapot_fuzz_seeds::write_corpus(&dir) {
        Ok(counts) => {
            for (target, n) in counts {
                println!("{}: {n} seeds", dir.join(target).display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("write-seeds: {e}");
            ExitCode::FAILURE
        }
    }
}
