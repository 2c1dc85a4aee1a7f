//! Panes as lines of text: a title line drawn as a block's top border draws it, and table
//! rows whose cells are cut to their columns with `…`. Every pane lays out its own lines
//! (`lines()`), each at most as wide as the pane, and the screen shows exactly those, so
//! render tests can check that nothing overwrote a pane or ran past its edge unseen.

use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
};

use super::{
    text,
    theme::{SELECTED_SYMBOL, Theme},
};

/// A pane's title line in `width` columns: the title, then `─` to the edge. A title too
/// long for the line is cut with `…`.
pub fn title_line(spans: Vec<Span<'static>>, width: usize) -> Line<'static> {
    let line = text::fit(Line::from(spans), width);
    let rest = width.saturating_sub(line.width());
    let mut line = line;
    if rest > 0 {
        line.spans.push(Span::raw("─".repeat(rest)));
    }
    line
}

/// One table row in `width` columns: a one-column mark (the selection's `▶`, or a space),
/// then each cell cut to its column (with `…`) and padded, one space between columns, as
/// ratatui's `Table` lays them out; columns beyond `width` are left out.
pub fn row(mark: &str, cells: Vec<Line<'static>>, widths: &[u16], width: usize) -> Line<'static> {
    let mut spans = vec![Span::raw(mark.to_string())];
    let mut used = text::width(mark);
    for (i, (cell, &w)) in cells.into_iter().zip(widths).enumerate() {
        let gap = usize::from(i > 0);
        let w = usize::from(w);
        if used + gap + w > width {
            break;
        }
        if gap > 0 {
            spans.push(Span::raw(" "));
        }
        let cell = text::pad(text::fit(cell, w), w);
        spans.extend(cell.spans);
        used += gap + w;
    }
    text::pad(Line::from(spans), width)
}

/// A row that may be the selection: marked with [`SELECTED_SYMBOL`] and drawn in the
/// selection's style when `chosen`, as every selectable table shows it.
pub fn selectable_row(
    chosen: bool,
    cells: Vec<Line<'static>>,
    widths: &[u16],
    width: usize,
    selected: Style,
) -> Line<'static> {
    let line = row(
        if chosen { SELECTED_SYMBOL } else { " " },
        cells,
        widths,
        width,
    );
    if chosen {
        line.patch_style(selected)
    } else {
        line
    }
}

/// A pane with nothing to show yet: its title line and, when there is a second row, `note`
/// dimmed.
pub fn empty_pane(title: &str, note: &str, theme: &Theme, area: Rect) -> Vec<Line<'static>> {
    let width = usize::from(area.width);
    let mut out = vec![title_line(
        vec![Span::styled(title.to_string(), theme.title)],
        width,
    )];
    if area.height > 1 {
        out.push(text::fit(Line::styled(note.to_string(), theme.dim), width));
    }
    out
}

/// A header row: the column names in `style` across the whole row.
pub fn header(names: &[String], widths: &[u16], width: usize, style: Style) -> Line<'static> {
    row(
        " ",
        names.iter().map(|n| Line::raw(n.clone())).collect(),
        widths,
        width,
    )
    .style(style)
}

/// Columns' total width with the mark and the spaces between them.
pub fn total_width(widths: &[u16]) -> usize {
    1 + widths.iter().map(|&w| usize::from(w)).sum::<usize>() + widths.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_cut_to_their_columns_and_columns_past_the_edge_left_out() {
        let cells = vec![
            Line::raw("5689"),
            Line::raw("kworker/u8:12-events_unbound"),
            Line::raw("0.45"),
        ];
        let line = row("▶", cells, &[7, 14, 7], 40);
        assert_eq!(
            line.to_string(),
            format!("▶5689    kworker/u8:12… 0.45{}", " ".repeat(12))
        );
        assert_eq!(line.width(), 40);
        let narrow = row(" ", vec![Line::raw("a"), Line::raw("b")], &[7, 14], 12);
        assert_eq!(
            narrow.to_string(),
            " a          ",
            "the second column does not fit"
        );
        assert_eq!(total_width(&[7, 14, 7]), 31);
    }

    #[test]
    fn a_title_line_fills_to_the_edge_or_is_cut() {
        assert_eq!(
            title_line(vec![Span::raw(" Disks ")], 12).to_string(),
            " Disks ─────"
        );
        assert_eq!(
            title_line(vec![Span::raw(" Processes by I/O ")], 12).to_string(),
            " Processes…─"
        );
    }
}
