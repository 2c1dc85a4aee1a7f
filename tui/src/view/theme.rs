//! Colours and symbols. Meaning is always carried by text or symbols as well, never by colour
//! alone (terminals differ, people differ).

use ratatui::style::{Color, Modifier, Style};

use crate::model::findings::Severity;

#[derive(Clone, Copy, Debug)]
pub struct Theme {
    pub title: Style,
    pub header: Style,
    pub selected: Style,
    pub dim: Style,
    pub warn: Style,
    pub queue_bar: Style,
    pub device_bar: Style,
    pub key: Style,
    /// A file's path (in a finding).
    pub file: Style,
    /// Heat map cells by shade level (0 empty to 4 busiest); the shade character carries the
    /// level too.
    pub heat: [Style; 5],
}

impl Default for Theme {
    fn default() -> Self {
        Self {
            title: Style::new().add_modifier(Modifier::BOLD),
            header: Style::new()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD),
            selected: Style::new().add_modifier(Modifier::REVERSED),
            dim: Style::new().fg(Color::DarkGray),
            warn: Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            queue_bar: Style::new().fg(Color::Magenta),
            device_bar: Style::new().fg(Color::Green),
            key: Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            file: Style::new().fg(Color::Magenta),
            // Gregg's heat maps run from pale to deep as the count grows.
            heat: [
                Style::new(),
                Style::new().fg(Color::Yellow),
                Style::new().fg(Color::LightRed),
                Style::new().fg(Color::Red),
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ],
        }
    }
}

impl Theme {
    /// A finding's severity as a symbol (readable without colour) and a style.
    pub fn severity(&self, severity: Severity) -> (&'static str, Style) {
        match severity {
            Severity::Critical => (
                "‼",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ),
            Severity::Warning => ("!", self.warn),
            Severity::Info => ("i", Style::new().fg(Color::Blue)),
        }
    }
}

/// Marks the selected row, so selection is visible without colour.
pub const SELECTED_SYMBOL: &str = "▶";
/// What starts a pane's title: `▸` for the pane with the keyboard, so the focus is visible
/// without colour and before any row is selected.
pub fn focus_mark(focused: bool) -> &'static str {
    if focused { "▸ " } else { " " }
}
