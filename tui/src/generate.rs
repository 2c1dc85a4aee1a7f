//! The man pages and shell completions, generated from the CLI definition for packaging:
//! `cargo xtask dist` runs the release binary with `IOTOP_BPF_GENERATE=DIR`. An environment
//! variable rather than a subcommand, so the generator shows up neither in `--help` nor in
//! the completions it writes.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::cli::Cli;

/// Set to a directory: write `man/` and `completions/` there and exit.
pub const ENV: &str = "IOTOP_BPF_GENERATE";
const NAME: &str = "iotop-bpf";

/// What was written, relative to `dir`.
pub fn generate(dir: &Path) -> Result<Vec<PathBuf>> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for sub in [&man, &completions] {
        std::fs::create_dir_all(sub).with_context(|| format!("create {}", sub.display()))?;
    }
    // One page per command: iotop-bpf.1, iotop-bpf-serve.1, iotop-bpf-workload-dstate.1...
    clap_mangen::generate_to(Cli::command(), &man)
        .with_context(|| format!("write the man pages to {}", man.display()))?;
    let mut written = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut Cli::command(), NAME, &completions)
            .with_context(|| format!("write the {shell} completions"))?;
        written.push(path);
    }
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&man)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    pages.sort();
    written.extend(pages);
    Ok(written
        .into_iter()
        .map(|p| p.strip_prefix(dir).map(Path::to_path_buf).unwrap_or(p))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_completions_come_from_the_cli() {
        let dir = std::env::temp_dir().join(format!("iotop-bpf-generate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = generate(&dir).unwrap();
        let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        for expected in [
            "completions/iotop-bpf.bash",
            "completions/_iotop-bpf",
            "completions/iotop-bpf.fish",
            "man/iotop-bpf.1",
            "man/iotop-bpf-serve.1",
            "man/iotop-bpf-check.1",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
        let page = std::fs::read_to_string(dir.join("man/iotop-bpf.1")).unwrap();
        assert!(
            page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH iotop-bpf 1"),
            "{page}"
        );
        assert!(page.contains("listen") && page.contains("serve"), "{page}");
        let serve = std::fs::read_to_string(dir.join("man/iotop-bpf-serve.1")).unwrap();
        assert!(serve.contains("127.0.0.1:10135"), "{serve}");
        for file in ["iotop-bpf.bash", "_iotop-bpf", "iotop-bpf.fish"] {
            let text = std::fs::read_to_string(dir.join("completions").join(file)).unwrap();
            assert!(
                text.contains("serve") && text.contains("--listen"),
                "{file}"
            );
            assert!(
                !text.to_lowercase().contains("generate"),
                "{file} shows no generator"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
