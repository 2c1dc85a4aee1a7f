//! Processes summed per cgroup (the live view's `C`): the grouping written once.

use std::collections::BTreeMap;

use super::{ProcFigures, ProcRow};

/// The group of processes whose requests carried no cgroup.
pub const NO_CGROUP: &str = "(unknown)";

/// The processes of one cgroup, summed.
#[derive(Clone, Debug, Default)]
pub struct CgroupSum {
    /// The cgroup's name ([`NO_CGROUP`] for processes whose requests carried none).
    pub name: String,
    /// How many processes it sums.
    pub members: usize,
    /// Their figures, summed by [`ProcFigures::sum`] (latency percentiles from the members'
    /// log2 histograms: coarser than a process's).
    pub figures: ProcFigures,
}

/// `procs`, each with the figures to sum (of the interval, or since start), summed per cgroup
/// name, in the order of the names.
pub fn cgroups<'a>(
    procs: impl IntoIterator<Item = (&'a ProcRow, &'a ProcFigures)>,
) -> Vec<CgroupSum> {
    let mut groups: BTreeMap<String, Vec<&ProcFigures>> = BTreeMap::new();
    for (row, figures) in procs {
        let name = row
            .cgroup
            .as_ref()
            .map_or_else(|| NO_CGROUP.to_string(), |c| c.name.clone());
        groups.entry(name).or_default().push(figures);
    }
    groups
        .into_iter()
        .map(|(name, members)| CgroupSum {
            name,
            members: members.len(),
            figures: ProcFigures::sum(members),
        })
        .collect()
}
