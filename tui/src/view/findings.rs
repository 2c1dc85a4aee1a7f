//! The findings pane: named pathological patterns, active ones first, then the worst and
//! the newest. A line says, in this order, the severity (a symbol and a word), the kind,
//! who (one process, or one program over several pids folded into one line: `git ×3
//! pids`), the file (shortened from the left, its name kept), whether it ended (in words,
//! not only greyer), and then the numbers, which are what gets cut on a narrow screen.
//! Tab focuses the pane, j/k select a line, Enter opens its full text (the
//! [`super::finding`] overlay). Lines that do not fit are counted in the title: `+N more`.

use std::fmt::Write as _;

use ratatui::{
    Frame,
    layout::Rect,
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{
    Focus, Theme, UiState, table, text,
    theme::{SELECTED_SYMBOL, focus_mark},
};
use crate::model::{
    Dev, Snapshot,
    findings::{Finding, FindingKind, Severity},
};

/// The worst active finding of each process that has one: one pass over the findings, for
/// tables that ask for every row.
pub fn severities(snap: &Snapshot) -> std::collections::HashMap<u32, Severity> {
    let mut out = std::collections::HashMap::new();
    for f in snap.findings.iter().filter(|f| f.active) {
        if let Some(tgid) = f.tgid {
            let worst = out.entry(tgid).or_insert(f.severity);
            *worst = (*worst).max(f.severity);
        }
    }
    out
}

/// What folds findings into one line: the same kind, program and file, whatever the pid
/// (a loop of `git` processes is one pattern, not one line per pid). A finding about a disk
/// has no pid and keeps its disk apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub kind: FindingKind,
    pub who: String,
    pub file: Option<String>,
    pub dev: Option<Dev>,
}

impl GroupKey {
    pub fn of(f: &Finding) -> Self {
        Self {
            kind: f.kind,
            who: f.comm.clone(),
            file: f.file().map(str::to_string),
            dev: if f.tgid.is_none() { f.dev } else { None },
        }
    }
}

/// One line of the pane: findings folded over pids, the leading one (active, worst, newest)
/// first.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    pub key: GroupKey,
    pub members: Vec<&'a Finding>,
}

impl Group<'_> {
    pub fn lead(&self) -> &Finding {
        self.members[0]
    }

    pub fn active(&self) -> bool {
        self.members.iter().any(|f| f.active)
    }

    pub fn severity(&self) -> Severity {
        self.members
            .iter()
            .map(|f| f.severity)
            .max()
            .unwrap_or(Severity::Info)
    }

    /// The pids it covers, ascending.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.members.iter().filter_map(|f| f.tgid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    pub fn last_seen_ns(&self) -> u64 {
        self.members
            .iter()
            .map(|f| f.last_seen_ns)
            .max()
            .unwrap_or(0)
    }
}

/// The pane's lines: findings folded by [`GroupKey`], active lines first, then the worst,
/// then the newest, then by key (so equal lines keep their order from one second to the
/// next).
pub fn groups(snap: &Snapshot) -> Vec<Group<'_>> {
    let mut groups: Vec<Group> = Vec::new();
    for f in &snap.findings {
        let key = GroupKey::of(f);
        match groups.iter_mut().find(|g| g.key == key) {
            Some(group) => group.members.push(f),
            None => groups.push(Group {
                key,
                members: vec![f],
            }),
        }
    }
    for group in &mut groups {
        group.members.sort_by(|a, b| {
            b.active
                .cmp(&a.active)
                .then(b.severity.cmp(&a.severity))
                .then(b.last_seen_ns.cmp(&a.last_seen_ns))
                .then(a.tgid.cmp(&b.tgid))
        });
    }
    groups.sort_by(|a, b| {
        b.active()
            .cmp(&a.active())
            .then(b.severity().cmp(&a.severity()))
            .then(b.last_seen_ns().cmp(&a.last_seen_ns()))
            .then(a.key.cmp(&b.key))
    });
    groups
}

/// The position of the selected line: the same key, or else the same kind and program (a
/// file seen first changes as new calls arrive; the selection should not drop for that).
pub fn selected(groups: &[Group], ui: &UiState) -> Option<usize> {
    let key = ui.selected_finding.as_ref()?;
    groups.iter().position(|g| &g.key == key).or_else(|| {
        groups
            .iter()
            .position(|g| g.key.kind == key.kind && g.key.who == key.who && g.key.dev == key.dev)
    })
}

/// Rows the pane wants (0 when there is nothing to show): a title and up to `most` of its
/// `groups`.
pub fn wanted_rows(groups: &[Group], most: u16) -> u16 {
    let lines = groups.len();
    if lines == 0 {
        0
    } else {
        u16::try_from(lines).unwrap_or(u16::MAX).min(most) + 1
    }
}

/// `git pid 5104`, `git ×3 pids`, `nvme0n1`.
pub fn who(group: &Group) -> String {
    match group.pids().as_slice() {
        [] => group.key.who.clone(),
        [pid] => format!("{} pid {pid}", group.key.who),
        many => format!("{} ×{} pids", group.key.who, many.len()),
    }
}

/// `12s`, `3m`: how long ago it was last seen.
pub fn ago(now_ns: u64, then_ns: u64) -> String {
    let secs = now_ns.saturating_sub(then_ns) / 1_000_000_000;
    if secs < 120 {
        format!("{secs}s")
    } else {
        format!("{}m", secs / 60)
    }
}

/// The summary without what the line already says: who (`git (pid 5104):`) and the files.
/// The detectors write one sentence for reports; the pane has said who and which file
/// before it gets to the numbers.
pub fn numbers(f: &Finding) -> String {
    let mut text = f.summary.as_str();
    if let Some(rest) = text.strip_prefix(f.comm.as_str()) {
        let rest = rest.trim_start();
        // `(pid 5104)` or `(pid 5104, tid 5104)`, then `:` or a space.
        let rest = match rest.strip_prefix('(').and_then(|r| r.split_once(')')) {
            Some((_, after)) => after,
            None => rest,
        };
        text = rest.trim_start_matches(':').trim_start();
    }
    let mut out = text.to_string();
    for file in &f.files {
        for joint in [
            "; files ",
            "; file ",
            ", syncing ",
            " on ",
            " to ",
            " of ",
            " in ",
            " for ",
        ] {
            out = out.replace(&format!("{joint}{file}"), "");
        }
        out = out.replace(&format!(" ({file})"), "");
        out = out.replace(file.as_str(), "");
    }
    // A clause that only held the file leaves its punctuation behind: `python3 (pid 1),
    // syncing FILE, waits behind ...` becomes `, waits behind ...` once both are gone.
    let tidy: Vec<&str> = out.split_whitespace().collect();
    tidy.join(" ")
        .replace(" ,", ",")
        .trim_start_matches([';', ',', ':', ' '])
        .trim_end_matches([';', ',', ':'])
        .to_string()
}

/// One line in `width` columns: severity, kind, who, file, `ended … ago`, numbers. The
/// numbers give way first, then the file's directories; the file's own name stays.
pub fn line(group: &Group, now_ns: u64, width: usize, theme: &Theme) -> Line<'static> {
    let severity = group.severity();
    let (symbol, sev_style) = theme.severity(severity);
    let active = group.active();
    let head = format!("{symbol} {} ", severity.short());
    let kind = format!("{} ", group.key.kind.name());
    let who = format!("{} ", who(group));
    let state = if active {
        String::new()
    } else {
        format!("ended {} ago ", ago(now_ns, group.last_seen_ns()))
    };
    let fixed = text::width(&head) + text::width(&kind) + text::width(&who) + text::width(&state);
    let room = width.saturating_sub(fixed);
    // The file gets what it needs up to all but 12 columns (the start of the numbers), and
    // never less than its own name with `…/`, which the numbers give way to.
    let file = group.key.file.as_deref().map(|path| {
        let name = text::width(path.rsplit('/').next().unwrap_or(path));
        let budget = room
            .saturating_sub(1 + 12)
            .max((name + 2).min(room.saturating_sub(1)));
        text::shorten_path(path, budget)
    });
    let file_width = file.as_deref().map_or(0, |f| text::width(f) + 1);
    let numbers = text::elide(&numbers(group.lead()), room.saturating_sub(file_width));
    // An ended line is greyed, and says so in words as well.
    let dim = |style: Style| if active { style } else { theme.dim };
    let mut spans = vec![
        Span::styled(head, dim(sev_style)),
        Span::styled(kind, dim(theme.key)),
        Span::styled(who, dim(theme.title)),
    ];
    if let Some(file) = file {
        spans.push(Span::styled(format!("{file} "), dim(theme.file)));
    }
    if !state.is_empty() {
        spans.push(Span::styled(state, theme.warn));
    }
    spans.push(Span::styled(numbers, dim(Style::new())));
    // Whatever the budgets gave, never past the width: cut from the end, saying so.
    text::fit(Line::from(spans), width)
}

/// `Findings: 1 active, 3 ended · +2 more`.
fn title(groups: &[Group], hidden: usize) -> String {
    let active = groups.iter().filter(|g| g.active()).count();
    let ended = groups.len() - active;
    let mut title = format!("Findings: {active} active");
    if ended > 0 {
        let _ = write!(title, ", {ended} ended");
    }
    if hidden > 0 {
        let _ = write!(title, " · +{hidden} more");
    }
    title
}

/// The lines in view: `rows` of them, the selected one among them.
pub fn window(total: usize, rows: usize, selected: Option<usize>) -> std::ops::Range<usize> {
    if total <= rows {
        return 0..total;
    }
    let start = selected.map_or(0, |s| (s + 1).saturating_sub(rows));
    start..start + rows
}

/// The pane's lines in `area`: the title (counts, `+N more`, a hint when it fits), then
/// one line per finding in view (of `groups`, [`super::Rows::groups`]), the selection among them.
pub fn lines(
    snap: &Snapshot,
    groups: &[Group],
    ui: &UiState,
    theme: &Theme,
    area: Rect,
) -> Vec<Line<'static>> {
    let focused = ui.focus == Focus::Findings;
    let rows = usize::from(area.height.saturating_sub(1));
    let selected = if focused { selected(groups, ui) } else { None };
    let window = window(groups.len(), rows, selected);
    let hidden = groups.len() - window.len();
    let width = usize::from(area.width);
    let (hint, style) = if focused {
        ("j/k select, Enter: why and fix ", theme.key)
    } else {
        ("Tab: open one ", theme.title)
    };
    let title = format!("{}{} ", focus_mark(focused), title(groups, hidden));
    // The count and `+N more` matter more than the hint: the hint goes when both do not fit.
    let title = if text::width(&title) + text::width(hint) + 2 <= width {
        format!("{title}─ {hint}")
    } else {
        title
    };
    let mut out = vec![table::title_line(vec![Span::styled(title, style)], width)];
    // Room for the selection mark when the pane is focused, as the tables do.
    let line_width = if focused {
        width.saturating_sub(1)
    } else {
        width
    };
    out.extend(window.map(|i| {
        let mut line = line(&groups[i], snap.now_ns, line_width, theme);
        if focused {
            let chosen = Some(i) == selected;
            line.spans
                .insert(0, Span::raw(if chosen { SELECTED_SYMBOL } else { " " }));
            if chosen {
                line = line.patch_style(theme.selected.add_modifier(Modifier::BOLD));
            }
        }
        line
    }));
    out
}

pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    groups: &[Group],
    ui: &UiState,
    theme: &Theme,
) {
    frame.render_widget(Paragraph::new(lines(snap, groups, ui, theme, area)), area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::demo_snapshot;

    fn finding(tgid: u32, comm: &str, file: &str, active: bool, last_seen_s: u64) -> Finding {
        let mut f = demo_snapshot()
            .findings
            .into_iter()
            .find(|f| f.kind == FindingKind::WriteAmplification)
            .unwrap();
        f.tgid = Some(tgid);
        f.comm = comm.to_string();
        f.files = vec![file.to_string()];
        f.summary = format!(
            "{comm} (pid {tgid}): 84x write amplification, fsync after 128 B writes: 200 of 200 fsyncs made 128 B durable; file {file}"
        );
        f.active = active;
        f.last_seen_ns = last_seen_s * 1_000_000_000;
        f
    }

    fn line_of(group: &Group, now_ns: u64, width: usize) -> String {
        line(group, now_ns, width, &Theme::default()).to_string()
    }

    #[test]
    fn the_same_program_kind_and_file_fold_over_pids() {
        let mut snap = demo_snapshot();
        let file = "/home/ana/repo/.git/objects/pack/tmp_pack_Ab12Cd";
        snap.now_ns = 20_000_000_000;
        snap.findings = vec![
            finding(5104, "git", file, false, 12),
            finding(5162, "git", file, false, 15),
            finding(5165, "git", file, false, 18),
            finding(6000, "git", "/other/file", true, 20),
            finding(7000, "rsync", file, false, 18),
        ];
        let groups = groups(&snap);
        assert_eq!(groups.len(), 3, "{groups:?}");
        assert!(groups[0].active(), "the active one first");
        assert_eq!(who(&groups[0]), "git pid 6000");
        assert_eq!(who(&groups[1]), "git ×3 pids");
        assert_eq!(groups[1].pids(), [5104, 5162, 5165]);
        assert_eq!(groups[1].lead().tgid, Some(5165), "the newest leads");
        assert_eq!(who(&groups[2]), "rsync pid 7000", "another program apart");
        assert_eq!(
            line_of(&groups[1], snap.now_ns, 80),
            "‼ CRIT write_amplification git ×3 pids …/tmp_pack_Ab12Cd ended 2s ago 84x write…"
        );
        let active = line_of(&groups[0], snap.now_ns, 80);
        assert!(
            active.starts_with(
                "‼ CRIT write_amplification git pid 6000 /other/file 84x write amplification"
            ),
            "{active}"
        );
        assert!(!active.contains("ended"), "{active}");
    }

    #[test]
    fn at_80_columns_the_file_name_comes_before_the_numbers() {
        let mut snap = demo_snapshot();
        let file = "/var/lib/postgresql/16/main/pg_wal/000000010000000000000042";
        snap.findings = vec![finding(5104, "postgres", file, true, 7)];
        let groups = groups(&snap);
        for width in [80, 100, 120, 200] {
            let line = line_of(&groups[0], snap.now_ns, width);
            assert!(text::width(&line) <= width, "{width}: {line}");
            let name = line.find("000000010000000000000042").unwrap_or_else(|| {
                panic!("{width}: the file's name is cut: {line}");
            });
            let kind = line.find("write_amplification").unwrap();
            let who = line.find("postgres pid 5104").unwrap();
            assert!(kind < who && who < name, "{width}: out of order: {line}");
            if let Some(numbers) = line.find("84x") {
                assert!(name < numbers, "{width}: numbers before the file: {line}");
            }
        }
        // At 200 columns nothing is cut.
        let wide = line_of(&groups[0], snap.now_ns, 200);
        assert!(
            wide.contains(file) && wide.ends_with("made 128 B durable"),
            "{wide}"
        );
    }

    #[test]
    fn numbers_lose_who_and_the_file() {
        let f = finding(42, "lab001", "/data/lab001.log", true, 1);
        assert_eq!(
            numbers(&f),
            "84x write amplification, fsync after 128 B writes: 200 of 200 fsyncs made 128 B durable"
        );
        let mut d = f.clone();
        d.comm = "make".into();
        d.files.clear();
        d.summary = "make (pid 4711, tid 4711) blocked in D for 7.00s, in kernel_clone".into();
        assert_eq!(numbers(&d), "blocked in D for 7.00s, in kernel_clone");
        // A clause of the file alone leaves no stray comma (noisy_neighbour's summary).
        let mut n = f.clone();
        n.comm = "python3".into();
        n.files = vec!["/db/system.journal".into()];
        n.summary = "python3 (pid 5416), syncing /db/system.journal, waits behind fio (pid 5501) \
                     on loop2: sync p50 18ms"
            .into();
        assert_eq!(
            numbers(&n),
            "waits behind fio (pid 5501) on loop2: sync p50 18ms"
        );
    }

    #[test]
    fn ended_is_said_in_words_and_minutes_after_two() {
        assert_eq!(ago(20_000_000_000, 8_000_000_000), "12s");
        assert_eq!(ago(200_000_000_000, 0), "3m");
        assert_eq!(ago(0, 5), "0s", "a clock that went back is not negative");
    }

    #[test]
    fn the_window_keeps_the_selection() {
        assert_eq!(window(3, 5, None), 0..3);
        assert_eq!(window(10, 3, None), 0..3);
        assert_eq!(window(10, 3, Some(7)), 5..8);
        assert_eq!(window(10, 3, Some(1)), 0..3);
        assert_eq!(window(10, 3, Some(9)), 7..10);
    }

    #[test]
    fn a_selection_follows_its_program_when_the_file_changes() {
        let mut snap = demo_snapshot();
        snap.findings = vec![
            finding(1, "a", "/x", true, 7),
            finding(2, "git", "/first", true, 7),
        ];
        let ui = UiState {
            selected_finding: Some(GroupKey::of(&snap.findings[1])),
            ..UiState::default()
        };
        assert_eq!(selected(&groups(&snap), &ui), Some(1));
        snap.findings[1].files = vec!["/second".into()];
        assert_eq!(selected(&groups(&snap), &ui), Some(1));
        snap.findings.pop();
        assert_eq!(selected(&groups(&snap), &ui), None);
    }
}
