//! Terminal lifecycle: raw mode and the alternate screen, always restored, on quit, on
//! error (Drop) and on panic (ratatui's hook restores before the panic message prints).

use anyhow::{Context as _, Result};
use ratatui::DefaultTerminal;

pub struct TerminalGuard {
    terminal: DefaultTerminal,
}

impl TerminalGuard {
    pub fn enter() -> Result<Self> {
        if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            anyhow::bail!(
                "standard output is not a terminal; use --batch or --json for headless output"
            );
        }
        let terminal = ratatui::try_init().context("set up the terminal")?;
        Ok(Self { terminal })
    }

    pub fn terminal(&mut self) -> &mut DefaultTerminal {
        &mut self.terminal
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}
