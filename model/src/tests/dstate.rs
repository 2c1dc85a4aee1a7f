//! Threads in uninterruptible sleep (D state): episodes over the intervals they span, the
//! threads already asleep at start, and the wait sites.

use super::*;
use crate::{DStateEpisode, DStateNow, WakeupStack};

fn now(pid: u32, tgid: u32, start_ns: Option<u64>) -> DStateNow {
    DStateNow {
        tid: pid,
        tgid,
        comm: "stuck".into(),
        start_ns,
        stack: vec!["io_schedule".into(), "folio_wait_bit_common".into()],
        no_stack: None,
    }
}

fn tick(model: &mut Aggregator, at_ns: u64, kernel_time: u64, in_d: Vec<DStateNow>) -> Snapshot {
    model.tick(&KernelSample {
        now_ns: at_ns,
        dstate_time: vec![(50, kernel_time)],
        dstate_now: in_d,
        ..sample(at_ns, &[])
    })
}

#[test]
fn a_long_episode_is_spread_over_the_intervals_it_spans_and_counted_once() {
    let mut model = Aggregator::new(Settings::default(), 0);
    // Blocked from 500 ms to 2700 ms.
    let s1 = tick(&mut model, 1_000 * MS, 0, vec![now(51, 50, Some(500 * MS))]);
    let s2 = tick(&mut model, 2_000 * MS, 0, vec![now(51, 50, Some(500 * MS))]);
    model.ingest_dstate(&DStateEpisode {
        tid: 51,
        tgid: 50,
        comm: Comm::new("stuck"),
        start_ns: 500 * MS,
        end_ns: 2_700 * MS,
        stack_id: 1,
        wakeup_stack: WakeupStack::None,
        stack: vec!["io_schedule".into()],
        no_stack: None,
    });
    let s3 = tick(&mut model, 3_000 * MS, 2_200 * MS, vec![]);
    let d = |s: &Snapshot| {
        s.procs
            .iter()
            .find(|p| p.tgid == 50)
            .map_or(0, |p| p.interval.dstate_ns)
    };
    assert_eq!(d(&s1), 500 * MS);
    assert_eq!(d(&s2), 1_000 * MS);
    assert_eq!(
        d(&s3),
        700 * MS,
        "the rest of the episode, not all of it again"
    );
    assert_eq!(
        s3.procs
            .iter()
            .find(|p| p.tgid == 50)
            .unwrap()
            .total()
            .dstate_ns,
        2_200 * MS
    );
    assert_eq!(s1.dstate[0].blocked_ns, Some(500 * MS));
    assert_eq!(s2.dstate[0].blocked_ns, Some(1_500 * MS));
    assert!(s3.dstate.is_empty());
    assert_eq!(s3.dstate_recent[0].duration_ns, 2_200 * MS);
}

#[test]
fn short_episodes_count_through_the_kernel_sum_alone() {
    let mut model = Aggregator::new(Settings::default(), 0);
    model.ingest(&io(50, "db", LOOP0, Op::Read, 4096, 0, 0, US));
    let _ = tick(&mut model, 1_000 * MS, 0, vec![]);
    let s = tick(&mut model, 2_000 * MS, 40 * MS, vec![]);
    assert_eq!(
        s.procs
            .iter()
            .find(|p| p.tgid == 50)
            .unwrap()
            .interval
            .dstate_ns,
        40 * MS
    );
    assert!(
        s.dstate_recent.is_empty(),
        "below the streaming threshold: no episode listed"
    );
}

#[test]
fn a_thread_already_in_d_at_start_is_listed_without_a_start() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let s = tick(
        &mut model,
        1_000 * MS,
        0,
        vec![now(77, 77, None), now(51, 50, Some(900 * MS))],
    );
    assert_eq!(s.dstate.len(), 2);
    assert_eq!(
        (s.dstate[0].tid, s.dstate[0].blocked_ns),
        (77, None),
        "unknown start sorts first"
    );
    assert_eq!(
        crate::wait_site(&s.dstate[1].stack, s.dstate[1].no_stack, 3),
        "io_schedule <- folio_wait_bit_common"
    );
}

#[test]
fn a_missing_wait_site_says_why_and_is_counted() {
    use crate::{NoStack, wait_site};
    assert_eq!(
        wait_site(&[], Some(NoStack::SymbolsHidden), 3),
        "? symbols hidden"
    );
    assert_eq!(
        wait_site(&[], Some(NoStack::NotSampled), 3),
        "? not sampled"
    );
    assert_eq!(wait_site(&[], None, 3), "?", "an old recording");
    assert_eq!(
        wait_site(&["schedule_timeout".into()], None, 3),
        "schedule_timeout",
        "only a generic wait: still a frame, not a question mark"
    );
    let mut model = Aggregator::new(Settings::default(), 0);
    let episode = |tid: u32, stack: Vec<String>, no_stack| DStateEpisode {
        tid,
        tgid: tid,
        comm: Comm::new("w"),
        start_ns: 100 * MS,
        end_ns: 150 * MS,
        stack_id: -2,
        wakeup_stack: WakeupStack::None,
        stack,
        no_stack,
    };
    model.ingest_dstate(&episode(1, vec!["io_schedule".into()], None));
    model.ingest_dstate(&episode(2, vec![], Some(NoStack::NotSampled)));
    model.ingest_dstate(&episode(3, vec![], Some(NoStack::SymbolsHidden)));
    model.ingest_dstate(&episode(4, vec![], Some(NoStack::Lost)));
    let s = tick(&mut model, 1_000 * MS, 0, vec![]);
    assert_eq!(
        s.dstate_sites,
        crate::SiteCounts {
            episodes: 4,
            resolved: 1,
            not_sampled: 1,
            symbols_hidden: 1,
            lost: 1
        }
    );
    let s = tick(&mut model, 2_000 * MS, 0, vec![]);
    assert_eq!(s.dstate_sites.episodes, 0, "per interval");
    let why: Vec<_> = s.dstate_recent.iter().map(|e| e.no_stack).collect();
    assert!(why.contains(&Some(NoStack::SymbolsHidden)), "{why:?}");
}

#[test]
fn a_task_blocked_for_seconds_raises_long_d_state() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let s = tick(
        &mut model,
        7_000 * MS,
        0,
        vec![now(51, 50, Some(1_000 * MS))],
    );
    let f = s
        .findings
        .iter()
        .find(|f| f.kind == crate::findings::FindingKind::LongDState)
        .unwrap();
    assert_eq!(f.tgid, Some(50));
    assert!(
        f.summary
            .contains("blocked in D for 6.00s, in io_schedule <- folio_wait_bit_common"),
        "{}",
        f.summary
    );
    assert!(f.fix.contains("its own I/O"), "{}", f.fix);
    let s = tick(
        &mut model,
        7_500 * MS,
        0,
        vec![now(51, 50, Some(4_000 * MS))],
    );
    assert!(
        s.findings.iter().all(|f| !f.active),
        "a 3.5 s episode is under the threshold"
    );
}
