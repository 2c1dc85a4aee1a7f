//! What the viewer chose: focus, sort, filter, selection, pause. The only mutable input of
//! rendering; the data itself comes from the [`Snapshot`](crate::model::Snapshot).

use std::collections::HashMap;

use crate::model::Dev;

/// The pane that has the keyboard (Tab: processes, findings, disks; Shift-Tab back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Focus {
    #[default]
    Processes,
    Findings,
    Disks,
}

/// Process table sort keys, in column order (`<` and `>` move along this list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SortKey {
    Pid,
    Comm,
    ReadOps,
    WriteOps,
    ReadBytes,
    WriteBytes,
    #[default]
    TotalBytes,
    P50,
    P99,
    Syncs,
    SyncP99,
    Amplification,
    DState,
}

impl SortKey {
    #[cfg(test)]
    pub const ALL: [Self; 13] = [
        Self::Pid,
        Self::Comm,
        Self::ReadOps,
        Self::WriteOps,
        Self::ReadBytes,
        Self::WriteBytes,
        Self::TotalBytes,
        Self::P50,
        Self::P99,
        Self::Syncs,
        Self::SyncP99,
        Self::Amplification,
        Self::DState,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Pid => "PID",
            Self::Comm => "COMM",
            Self::ReadOps => "R/s",
            Self::WriteOps => "W/s",
            Self::ReadBytes => "RMB/s",
            Self::WriteBytes => "WMB/s",
            Self::TotalBytes => "I/O MB/s",
            Self::P50 => "p50",
            Self::P99 => "p99",
            Self::Syncs => "SYNC/s",
            Self::SyncP99 => "sync p99",
            Self::Amplification => "AMP",
            Self::DState => "time in D",
        }
    }

    /// Names and pids read best ascending, rates and latencies descending.
    pub fn descending_by_default(self) -> bool {
        !matches!(self, Self::Pid | Self::Comm)
    }

    /// The next key among `shown` (the columns on screen), forward or back, wrapping; the
    /// first of them when this one is not among them.
    pub fn cycle(self, shown: &[Self], forward: bool) -> Self {
        let Some(at) = shown.iter().position(|&k| k == self) else {
            return shown.first().copied().unwrap_or(self);
        };
        let n = shown.len();
        shown[if forward {
            (at + 1) % n
        } else {
            (at + n - 1) % n
        }]
    }
}

/// A row of the process table: a process, or a group of them (a cgroup, kernel workers of
/// one kind folded into one row).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RowKey {
    Pid(u32),
    Group(String),
}

/// What an order was made for: another sort, direction, period or grouping starts over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderOf {
    pub sort: SortKey,
    pub reversed: bool,
    pub cumulative: bool,
    pub by_cgroup: bool,
    pub expand_workers: bool,
}

/// How much better a row must be to overtake the one above at once (15%); a row better by
/// less overtakes when it is still better the next interval.
pub const OVERTAKE_MARGIN: f64 = 0.15;

/// The process table's order kept from one interval to the next (hysteresis): near-equal
/// rows do not swap every second, so people can follow a row with their eyes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Steady {
    pub of: Option<OrderOf>,
    /// Rows, top first.
    pub order: Vec<RowKey>,
    /// Intervals a row has been better than the row above it without overtaking.
    ahead: HashMap<RowKey, u8>,
}

impl Steady {
    /// The order for this interval. `ranked`: the rows in the sort's order, each with the
    /// value it is sorted by (`None`: a name or pid, exact and stable: no hysteresis);
    /// `descending`: larger values go first. A row keeps its place unless it is better than
    /// the row above by more than [`OVERTAKE_MARGIN`], or was better the interval before
    /// too; new rows go where their value puts them; equal rows never swap.
    pub fn next(&self, of: OrderOf, ranked: &[(RowKey, Option<f64>)], descending: bool) -> Self {
        let fresh = || Self {
            of: Some(of),
            order: ranked.iter().map(|(k, _)| k.clone()).collect(),
            ahead: HashMap::new(),
        };
        if self.of != Some(of) || ranked.iter().any(|(_, v)| v.is_none()) {
            return fresh();
        }
        let value = |i: usize| ranked[i].1.unwrap_or(0.0);
        let better = |a: f64, b: f64| if descending { a > b } else { a < b };
        let by_margin = |a: f64, b: f64| {
            if descending {
                a > b * (1.0 + OVERTAKE_MARGIN)
            } else {
                a * (1.0 + OVERTAKE_MARGIN) < b
            }
        };
        let before: HashMap<&RowKey, usize> =
            self.order.iter().enumerate().map(|(i, k)| (k, i)).collect();
        // The rows seen before, in their order; then each new one above the first row it is
        // better than.
        let mut list: Vec<usize> = (0..ranked.len())
            .filter(|&i| before.contains_key(&ranked[i].0))
            .collect();
        list.sort_by_key(|&i| before[&ranked[i].0]);
        for i in (0..ranked.len()).filter(|&i| !before.contains_key(&ranked[i].0)) {
            let at = list
                .iter()
                .position(|&j| better(value(i), value(j)))
                .unwrap_or(list.len());
            list.insert(at, i);
        }
        // Overtaking: each swap puts a strictly better row above a worse one, so this ends.
        let was_ahead = |i: usize| self.ahead.get(&ranked[i].0).copied().unwrap_or(0) > 0;
        loop {
            let mut swapped = false;
            for at in 1..list.len() {
                let (up, down) = (list[at - 1], list[at]);
                let (u, d) = (value(up), value(down));
                if better(d, u) && (by_margin(d, u) || was_ahead(down)) {
                    list.swap(at - 1, at);
                    swapped = true;
                }
            }
            if !swapped {
                break;
            }
        }
        let mut ahead = HashMap::new();
        for at in 1..list.len() {
            let (up, down) = (list[at - 1], list[at]);
            if better(value(down), value(up)) {
                let streak = self.ahead.get(&ranked[down].0).copied().unwrap_or(0);
                ahead.insert(ranked[down].0.clone(), streak.saturating_add(1));
            }
        }
        Self {
            of: Some(of),
            order: list.into_iter().map(|i| ranked[i].0.clone()).collect(),
            ahead,
        }
    }

    /// Where `key` goes in the table under `of`: its place in this order, or `None` (no
    /// order for this sort yet, or a row new since: the sort's own order places it).
    pub fn position(&self, of: OrderOf, key: &RowKey) -> Option<usize> {
        if self.of != Some(of) {
            return None;
        }
        self.order.iter().position(|k| k == key)
    }
}

/// The latency a heat map shows (`l` cycles them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeatKind {
    /// Created to completed.
    Total,
    /// Created to issued.
    Queue,
    /// Issued to completed.
    #[default]
    Device,
    /// A process's sync calls (fsync and friends).
    Sync,
}

impl HeatKind {
    pub fn next(self) -> Self {
        match self {
            Self::Total => Self::Queue,
            Self::Queue => Self::Device,
            Self::Device => Self::Sync,
            Self::Sync => Self::Total,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct UiState {
    pub focus: Focus,
    pub sort: SortKey,
    /// Flip the key's natural direction.
    pub reversed: bool,
    /// Case-insensitive substring of the comm, or an exact pid.
    pub filter: String,
    /// The filter is being typed.
    pub editing_filter: bool,
    /// Selection by identity, so rows can move under it without the selection jumping.
    pub selected_pid: Option<u32>,
    pub selected_disk: Option<Dev>,
    /// Show totals since start instead of the last interval.
    pub cumulative: bool,
    /// Kernel workers one row each, instead of one row per kind (`kworker ×6`; the `x` key).
    pub expand_workers: bool,
    /// The process table's order, kept from one interval to the next.
    pub order: Steady,
    /// One row per cgroup instead of per process (the `C` key).
    pub by_cgroup: bool,
    /// Keep showing the same snapshot (the model keeps counting underneath).
    pub paused: bool,
    pub show_help: bool,
    /// The drill-down of the selected process (Enter).
    pub show_detail: bool,
    /// The findings pane's selection: a line (one finding, or several folded over pids) by
    /// its identity, so it stays on the same finding as the list reorders.
    pub selected_finding: Option<super::findings::GroupKey>,
    /// The selected finding's full text (Enter in the findings pane).
    pub show_finding: bool,
    /// Lines scrolled in the finding's full text (j/k while it is open).
    pub scroll: u16,
    /// Host and kernel, for the status bar.
    pub host: String,
    pub kernel: String,
    /// Degraded sources, shown once in the status line.
    pub notes: Vec<String>,
    /// The bottom pane shows the latency heat map over time instead of the histograms.
    pub show_heatmap: bool,
    pub heat_kind: HeatKind,
    /// While paused: how many intervals before the newest the screen shows (stepping back).
    pub back: u64,
    /// Wall clock (ms since the epoch) at the run's start: the time of an interval on screen.
    pub started_unix_ms: u64,
    /// A one-off message for the key line (where a screen capture went); cleared by a key.
    pub message: Option<String>,
    /// What to look at now (the demo's caption), on the key line until replaced.
    pub caption: Option<String>,
    /// The screen is up and the probes are still loading (`app::Starting`): the empty panes
    /// say so rather than that there was no I/O.
    pub probes_loading: bool,
    /// This screen is a second viewer's (`iotop-bpf attach`): its link to the running tool.
    pub link: Option<Link>,
    /// The recording (`--record`), when there is one.
    pub recording: Option<Rec>,
}

/// The recording's state, for the status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rec {
    /// Recording; `dropped`: events left out while the disk fell behind.
    On { dropped: u64 },
    /// A write failed: `stopped at <time>, <reason>` (the view goes on).
    Stopped(String),
}

/// An attached viewer's link to the tool it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// Receiving its intervals; `lost`: frames the tool dropped because this viewer read
    /// them too slowly.
    Attached { lost: u64 },
    /// The tool went away or cannot be reached (why); the viewer keeps trying.
    Lost { why: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    const OF: OrderOf = OrderOf {
        sort: SortKey::TotalBytes,
        reversed: false,
        cumulative: false,
        by_cgroup: false,
        expand_workers: false,
    };

    fn ranked(rows: &[(u32, f64)]) -> Vec<(RowKey, Option<f64>)> {
        let mut rows: Vec<(RowKey, Option<f64>)> = rows
            .iter()
            .map(|&(pid, v)| (RowKey::Pid(pid), Some(v)))
            .collect();
        // As the table sorts them: the value, ties by pid.
        rows.sort_by(|a, b| {
            b.1.unwrap()
                .total_cmp(&a.1.unwrap())
                .then(format!("{:?}", a.0).cmp(&format!("{:?}", b.0)))
        });
        rows
    }

    fn pids(order: &Steady) -> Vec<u32> {
        order
            .order
            .iter()
            .map(|k| match k {
                RowKey::Pid(pid) => *pid,
                RowKey::Group(_) => 0,
            })
            .collect()
    }

    #[test]
    fn near_equal_rows_do_not_swap_every_second() {
        let mut order = Steady::default().next(OF, &ranked(&[(1, 100.0), (2, 96.0)]), true);
        assert_eq!(pids(&order), [1, 2]);
        // They take turns being a little ahead, as two similar writers do.
        for second in 0..10 {
            let (a, b) = if second % 2 == 0 {
                (96.0, 104.0)
            } else {
                (103.0, 97.0)
            };
            order = order.next(OF, &ranked(&[(1, a), (2, b)]), true);
            assert_eq!(pids(&order), [1, 2], "second {second}");
        }
    }

    #[test]
    fn a_row_far_ahead_overtakes_at_once() {
        let order = Steady::default().next(OF, &ranked(&[(1, 100.0), (2, 96.0), (3, 10.0)]), true);
        let next = order.next(OF, &ranked(&[(1, 100.0), (2, 96.0), (3, 500.0)]), true);
        assert_eq!(pids(&next), [3, 1, 2], "5x ahead passes both rows above it");
    }

    #[test]
    fn a_row_a_little_ahead_overtakes_on_the_second_interval() {
        let order = Steady::default().next(OF, &ranked(&[(1, 100.0), (2, 96.0)]), true);
        let once = order.next(OF, &ranked(&[(1, 100.0), (2, 108.0)]), true);
        assert_eq!(pids(&once), [1, 2], "8% ahead once: not yet");
        let twice = once.next(OF, &ranked(&[(1, 100.0), (2, 108.0)]), true);
        assert_eq!(pids(&twice), [2, 1], "still ahead: it overtakes");
        let after = twice.next(OF, &ranked(&[(1, 105.0), (2, 100.0)]), true);
        assert_eq!(pids(&after), [2, 1], "and keeps its place in turn");
    }

    #[test]
    fn new_rows_go_where_their_value_puts_them_and_gone_rows_leave() {
        let order = Steady::default().next(OF, &ranked(&[(1, 100.0), (2, 50.0)]), true);
        let next = order.next(OF, &ranked(&[(2, 50.0), (3, 70.0), (4, 1.0)]), true);
        assert_eq!(pids(&next), [3, 2, 4]);
    }

    #[test]
    fn equal_rows_keep_their_order_and_ascending_sorts_work_the_other_way() {
        let order = Steady::default().next(OF, &ranked(&[(1, 5.0), (2, 5.0)]), true);
        assert_eq!(pids(&order), [1, 2]);
        let asc = OrderOf {
            reversed: true,
            ..OF
        };
        let up = |rows: &[(u32, f64)]| {
            let mut r = ranked(rows);
            r.reverse();
            r
        };
        let order = Steady::default().next(asc, &up(&[(1, 10.0), (2, 20.0)]), false);
        assert_eq!(pids(&order), [1, 2]);
        let near = order.next(asc, &up(&[(1, 10.0), (2, 9.5)]), false);
        assert_eq!(pids(&near), [1, 2], "5% lower is not enough at once");
        let far = order.next(asc, &up(&[(1, 10.0), (2, 2.0)]), false);
        assert_eq!(pids(&far), [2, 1]);
    }

    #[test]
    fn another_sort_or_names_start_over_in_the_sorts_own_order() {
        let order = Steady::default().next(OF, &ranked(&[(1, 100.0), (2, 96.0)]), true);
        let by_pid = OrderOf {
            sort: SortKey::Pid,
            ..OF
        };
        let names = vec![(RowKey::Pid(2), None), (RowKey::Pid(1), None)];
        let next = order.next(by_pid, &names, false);
        assert_eq!(pids(&next), [2, 1]);
        assert_eq!(order.position(by_pid, &RowKey::Pid(1)), None);
        assert_eq!(order.position(OF, &RowKey::Pid(2)), Some(1));
    }

    #[test]
    fn sort_keys_cycle_among_the_columns_shown() {
        let shown = [SortKey::Pid, SortKey::P99, SortKey::Syncs];
        assert_eq!(SortKey::P99.cycle(&shown, true), SortKey::Syncs);
        assert_eq!(SortKey::Syncs.cycle(&shown, true), SortKey::Pid);
        assert_eq!(SortKey::Pid.cycle(&shown, false), SortKey::Syncs);
        assert_eq!(SortKey::SyncP99.cycle(&shown, true), SortKey::Pid);
    }
}
