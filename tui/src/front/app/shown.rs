//! The live view's snapshot with every name shown (`crate::names::show`): its panes, its
//! history and its `w` capture draw the shown names and count their widths. JSON and the
//! exporter take the snapshot as it is.

use std::borrow::Cow;

use crate::{
    model::{ProcFigures, Snapshot, findings::Evidence},
    names::show,
};

fn fix(text: &mut String) {
    if let Cow::Owned(shown) = show(text) {
        *text = shown;
    }
}

fn fix_all<'a>(texts: impl IntoIterator<Item = &'a mut String>) {
    texts.into_iter().for_each(fix);
}

/// Every name in `snap` shown (the live view's: its panes, history and captures draw the
/// shown names, and count their widths). JSON and the exporter take the snapshot as it is.
pub fn defuse(snap: &mut Snapshot) {
    for d in &mut snap.disks {
        fix(&mut d.name);
        fix_all(d.scheduler.as_mut());
    }
    for p in &mut snap.procs {
        fix(&mut p.comm);
        if let Some(c) = &mut p.cgroup {
            fix_all([&mut c.path, &mut c.name]);
        }
        figures(&mut p.interval);
        if let Some(f) = &mut p.since_start {
            figures(f);
        }
        fix_all(p.devices.iter_mut().map(|d| &mut d.name));
        fix_all(p.recent_syncs.iter_mut().map(|s| &mut s.file));
        if let Some(limits) = &mut p.io_limits {
            fix(&mut limits.cgroup);
            fix_all(limits.limits.iter_mut().map(|l| &mut l.file));
        }
        if let Some(dirty) = &mut p.dirty_state {
            fix(&mut dirty.bdi);
        }
    }
    for f in &mut snap.findings {
        fix_all([&mut f.comm, &mut f.summary, &mut f.why, &mut f.fix]);
        fix_all(&mut f.files);
        for (_, value) in &mut f.evidence {
            if let Evidence::Text(text) = value {
                fix(text);
            }
        }
    }
    for d in &mut snap.dstate {
        fix(&mut d.comm);
        fix_all(&mut d.stack);
    }
    for d in &mut snap.dstate_recent {
        fix(&mut d.comm);
        fix_all(&mut d.stack);
    }
}

fn figures(f: &mut ProcFigures) {
    let parties = f
        .written_back_by
        .iter_mut()
        .chain(&mut f.wrote_back_for)
        .chain(&mut f.sync.charged_from)
        .chain(&mut f.sync.on_behalf_of);
    fix_all(parties.map(|p| &mut p.comm));
    let s = &mut f.sync;
    let counted = s
        .files
        .iter_mut()
        .chain(&mut s.small_files)
        .chain(&mut s.empty_files)
        .chain(&mut s.settled_files.top);
    fix_all(counted.map(|(name, _)| name));
    fix_all(
        s.files_recent
            .iter_mut()
            .chain(&mut s.small_files_recent)
            .chain(&mut s.settled_files.recent),
    );
    fix_all(f.dio.file.as_mut());
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "\x1b]2;PWNED\x07z";

    #[test]
    fn a_snapshot_is_defused_everywhere_a_name_goes() {
        let mut snap = crate::model::fixtures::demo_snapshot();
        let hostile_path = format!("/data/{HOSTILE}\n.log");
        snap.procs[0].comm = HOSTILE.into();
        snap.procs[0].interval.sync.files = vec![(hostile_path.clone(), 3)];
        snap.procs[0].recent_syncs.truncate(0);
        snap.findings[0].summary = format!("fsyncs {hostile_path}");
        snap.findings[0].files = vec![hostile_path];
        snap.dstate_recent.truncate(0);
        defuse(&mut snap);
        let dump = format!("{snap:?}");
        assert!(
            !snap.procs[0].comm.contains('\x1b') && snap.procs[0].comm.contains("\\x1b"),
            "{}",
            snap.procs[0].comm
        );
        assert!(!snap.findings[0].summary.contains('\n'));
        assert!(snap.findings[0].files[0].ends_with("\\x0a.log"));
        // Debug shows a raw control character as `\u{1b}`: none is left anywhere.
        assert!(
            !dump.contains("\\u{1b}") && !dump.contains("\\u{7}"),
            "{dump}"
        );
    }
}
