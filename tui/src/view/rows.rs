//! The rows on screen, derived in one place: [`Rows`] is the view model of one snapshot as
//! the viewer chose to see it (filter, sort, period, grouping, selection, the kept order).
//! The layout and the panes read it; none of them derives a row from the snapshot itself.
//! `view::render` derives it once a frame, and the live view (`App`) once when a new
//! interval is shown, to keep its focus and the process table's order true to it.

use std::collections::HashMap;

use super::{
    UiState,
    findings::{self, Group},
    procs::{self, Entry},
    state::Steady,
};
use crate::model::{ProcRow, Snapshot, findings::Severity};

/// What the screen lists for one snapshot and one [`UiState`].
#[derive(Debug)]
pub struct Rows<'a> {
    /// The worst active finding of each process that has one: its row is marked, kept in
    /// view and never folded.
    pub marked: HashMap<u32, Severity>,
    /// The processes listed (filtered; with I/O or syncs in the period shown, selected, or
    /// with a finding), in the sort's order, not folded.
    pub visible: Vec<&'a ProcRow>,
    /// Listed processes the filter hides (0 without a filter).
    pub filtered_out: usize,
    /// The process table's rows in the order shown: kernel workers folded by kind (or one
    /// row per cgroup), kept in the order of the interval before where no row overtook.
    pub entries: Vec<Entry<'a>>,
    /// Where each row of the sort's own order is in `entries`: the next kept order starts
    /// from the sort's order.
    ranked: Vec<usize>,
    /// The rows with an active finding (indices into `entries`), the worst first.
    pub pinned: Vec<usize>,
    /// The findings pane's lines: findings folded over pids, in the pane's order.
    pub groups: Vec<Group<'a>>,
}

impl<'a> Rows<'a> {
    pub fn new(snap: &'a Snapshot, ui: &UiState) -> Self {
        let marked = findings::severities(snap);
        let visible = procs::visible_of(snap, ui, &marked);
        let filtered_out = procs::filtered_out(snap, ui, &marked);
        let ranked = procs::ranked(&visible, &marked, ui);
        // The kept order; rows it does not know (the selection of an idle process) go last,
        // in the sort's order.
        let of = procs::order_of(ui);
        let mut shown: Vec<usize> = (0..ranked.len()).collect();
        shown.sort_by_key(|&i| {
            ui.order
                .position(of, &ranked[i].key(ui))
                .unwrap_or(usize::MAX)
        });
        let mut place = vec![0; ranked.len()];
        for (at, &i) in shown.iter().enumerate() {
            place[i] = at;
        }
        let mut slots: Vec<Option<Entry<'a>>> = ranked.into_iter().map(Some).collect();
        let entries: Vec<Entry<'a>> = shown.iter().filter_map(|&i| slots[i].take()).collect();
        let pinned = procs::pinned(&entries, &marked, ui);
        Self {
            marked,
            visible,
            filtered_out,
            entries,
            ranked: place,
            pinned,
            groups: findings::groups(snap),
        }
    }

    /// The process table's order for this snapshot, newly on screen: the order before, where
    /// no row overtook (`ui.order`, which these rows were put in).
    pub fn next_order(&self, ui: &UiState) -> Steady {
        procs::advance_order(self.ranked.iter().map(|&at| &self.entries[at]), ui)
    }
}
