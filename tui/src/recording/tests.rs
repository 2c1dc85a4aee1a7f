//! Recordings written and read back: exactly, however they end (cut by a kill, damaged in the
//! middle, stopped by a full disk, rotated), never with a panic.

use std::{
    io,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Condvar, Mutex},
};

use super::{
    writer::{Sink, Storage},
    *,
};
use crate::model::{
    BlockIo, Comm, CpuJiffies, Dev, HostSample, Input, KernelSample, LoadAvg, Op, SampleKind,
};

/// A scratch directory, removed with everything in it when dropped.
struct Temp(PathBuf);

impl std::ops::Deref for Temp {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp(name: &str) -> Temp {
    let dir = std::env::temp_dir().join(format!("iotop-bpf-rec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Temp(dir)
}

fn block_of(tgid: u32, at: u64) -> Input {
    Input::Block(BlockIo {
        dev: Dev::new(7, 0),
        sector: 8 + at / 1_000,
        bytes: 4096,
        op: Op::Write,
        flags: 1,
        tgid,
        tid: tgid + 1,
        comm: Comm::new("lab001"),
        created_ns: at + 10,
        issued_ns: at + 20,
        completed_ns: at + 90,
        error: 0,
        kernel_thread: false,
        cgroup: 0,
        dirtier: None,
        file: None,
    })
}

fn block() -> Input {
    block_of(42, 0)
}

fn sample_of(kind: SampleKind, now_ns: u64) -> Input {
    Input::Sample(Box::new(KernelSample {
        kind,
        now_ns,
        ..KernelSample::default()
    }))
}

fn sample(now_ns: u64) -> Input {
    sample_of(SampleKind::Interval, now_ns)
}

fn header() -> Header {
    new_header(
        "db01".into(),
        "6.18".into(),
        5,
        1_795_305_600_000,
        1_000_000_000,
    )
}

fn options(path: &Path) -> Options {
    Options {
        path: path.to_path_buf(),
        max: None,
    }
}

/// `intervals` intervals of `per` requests each, the last one final when `finished`.
fn run(intervals: u64, per: u64, finished: bool) -> Vec<Input> {
    let mut inputs = vec![sample_of(SampleKind::Baseline, 5)];
    for i in 1..=intervals {
        for r in 0..per {
            inputs.push(block_of(
                100 + (r % 7) as u32,
                i * 1_000_000_000 + r * 1_000,
            ));
        }
        let kind = if finished && i == intervals {
            SampleKind::Final
        } else {
            SampleKind::Interval
        };
        inputs.push(sample_of(kind, i * 1_000_000_000 + 5));
    }
    inputs
}

fn record(path: &Path, inputs: &[Input]) {
    let mut recorder = Recorder::create(&options(path), &header()).unwrap();
    for input in inputs {
        recorder.input(input);
    }
}

/// Everything a replay gives, and what it noted.
fn replay(paths: &[PathBuf]) -> (Vec<Input>, Vec<Note>) {
    let mut replayer = Replayer::open(paths).unwrap();
    let mut inputs = Vec::new();
    while let Some(input) = replayer.next_input() {
        inputs.push(input);
    }
    (inputs, replayer.notes().to_vec())
}

fn intervals(inputs: &[Input]) -> usize {
    inputs
        .iter()
        .filter(|i| matches!(i, Input::Sample(s) if s.kind != SampleKind::Baseline))
        .count()
}

#[test]
fn inputs_round_trip_through_a_private_file() {
    let dir = temp("round-trip");
    let path = dir.join("r.rec");
    let with_host = Input::Sample(Box::new(KernelSample {
        now_ns: 2_000,
        kind: SampleKind::Final,
        host: HostSample {
            load: Some(LoadAvg {
                one_hundredths: 210,
                five_hundredths: 150,
                fifteen_hundredths: 80,
            }),
            procs_blocked: Some(1),
            cpu: Some(CpuJiffies {
                iowait: 28_391,
                ..CpuJiffies::default()
            }),
            psi_io_full_avg10_hundredths: Some(302),
            dirty_bytes: Some(40 << 20),
            ..HostSample::default()
        },
        ..KernelSample::default()
    }));
    let inputs = vec![block(), Input::BadRecords(3), sample(1_000), with_host];
    record(&path, &inputs);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "it holds other processes' names and paths");
    let replayer = Replayer::open(std::slice::from_ref(&path)).unwrap();
    assert_eq!(replayer.header, header());
    let (back, notes) = replay(&[path]);
    assert_eq!(back, inputs);
    assert_eq!(notes, [], "a whole recording says nothing");
}

#[test]
fn a_recording_killed_between_intervals_ends_early_and_cut_in_a_frame_is_cut() {
    let dir = temp("cut");
    let path = dir.join("r.rec");
    let inputs = run(10, 100, false);
    record(&path, &inputs);
    // Not finished (killed): no end record, every interval whole.
    let (back, notes) = replay(std::slice::from_ref(&path));
    assert_eq!(back, inputs);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(
        matches!(&notes[..], [Note { mark: Mark::Early { at }, .. }] if *at == len),
        "{notes:?}"
    );
    // Killed while writing the last frame: everything before it, and where it was cut.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 7).unwrap();
    let (back, notes) = replay(std::slice::from_ref(&path));
    assert_eq!(intervals(&back), 9, "the last whole interval is the ninth");
    assert_eq!(back[..], inputs[..back.len()]);
    let [note] = &notes[..] else {
        panic!("{notes:?}")
    };
    assert!(
        matches!(note.mark, Mark::Cut { at, frame } if at == len - 7 && frame < at),
        "{note:?}"
    );
    assert!(!note.damaged() && note.ends_early());
    let line = note.line();
    assert!(
        line.contains(&format!("cut short at byte {}", len - 7)),
        "{line}"
    );
    assert!(line.contains("up to 2026-11-22T00:00:09.000Z"), "{line}");
}

#[test]
fn a_bit_flipped_in_the_middle_is_damage_not_a_cut_and_names_its_offset() {
    let dir = temp("flip");
    let path = dir.join("r.rec");
    let inputs = run(10, 100, true);
    record(&path, &inputs);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let (back, notes) = replay(std::slice::from_ref(&path));
    assert!(
        intervals(&back) >= 3,
        "{} intervals before",
        intervals(&back)
    );
    assert_eq!(
        back[..],
        inputs[..back.len()],
        "nothing damaged is replayed"
    );
    let [note] = &notes[..] else {
        panic!("{notes:?}")
    };
    let Mark::Damaged { at, .. } = note.mark else {
        panic!("{note:?}")
    };
    assert!(
        at <= middle as u64 && at > 100,
        "damage at {at}, flipped {middle}"
    );
    assert!(note.damaged());
    assert!(note.line().contains("not cut short"), "{}", note.line());
}

#[test]
fn a_format_4_recording_still_replays_whole() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/recordings/incident.rec");
    let (back, notes) = replay(&[path]);
    assert_eq!(notes, []);
    assert!(intervals(&back) > 5, "{}", intervals(&back));
}

/// The replay fuzz: 400 mutants of a recording (bits flipped, bytes cut, overwritten) each
/// replay to where they break and say so in one line, never a panic, never a record that
/// was not written.
#[test]
fn four_hundred_mutants_replay_to_where_they_break() {
    let dir = temp("fuzz");
    let path = dir.join("base.rec");
    let inputs = run(12, 300, true);
    record(&path, &inputs);
    let original = std::fs::read(&path).unwrap();
    let mutant = dir.join("mutant.rec");
    let mut noise = crate::fuzz::garbage(0..400).map(|g| {
        g.iter()
            .fold(0u64, |acc, &b| acc.rotate_left(8) ^ u64::from(b))
    });
    for n in 0..400usize {
        let r = noise.next().unwrap() as usize;
        let mut bytes = original.clone();
        let at = 12 + r % (bytes.len() - 12);
        match n % 4 {
            0 => bytes[at] ^= 1 << (r % 8),
            1 => bytes.truncate(at),
            2 => bytes[at..]
                .iter_mut()
                .take(16)
                .for_each(|b| *b = (r >> 8) as u8),
            _ => {
                bytes.drain(at..(at + 1 + r % 64).min(bytes.len()));
            }
        }
        std::fs::write(&mutant, &bytes).unwrap();
        let Ok(mut replayer) = Replayer::open(std::slice::from_ref(&mutant)) else {
            continue; // a damaged header: one clear error, tested with the bad files
        };
        let mut back = Vec::new();
        while let Some(input) = replayer.next_input() {
            back.push(input);
        }
        for note in replayer.notes() {
            assert!(!note.line().contains('\n'), "mutant {n}: {}", note.line());
        }
        if replayer.notes().is_empty() {
            // A mutation that changed nothing read (a checksum can miss one in 2^32).
            assert_eq!(back, inputs, "mutant {n} read whole but differs");
        }
        if n % 4 == 1 {
            assert_eq!(
                back[..],
                inputs[..back.len()],
                "mutant {n}: a cut is a prefix"
            );
        }
    }
}

#[test]
fn version_1_json_lines_still_replay() {
    let dir = temp("v1");
    let path = dir.join("v1");
    let v1 = concat!(
        r#"{"format":"iotop-bpf recording","version":1,"host":"h","kernel":"k","started_ns":0,"started_unix_ms":0,"interval_ns":1000000000}"#,
        "\n",
        r#"{"block":{"dev":{"major":7,"minor":0},"sector":8,"bytes":4096,"op":"Write","flags":1,"tgid":42,"pid":43,"comm":"lab001","created_ns":10,"issued_ns":20,"completed_ns":90,"error":0,"kernel_thread":false}}"#,
        "\n",
        r#"{"sample":{"now_ns":1000,"counters":{"ring_dropped":0,"complete_without_start":0,"issue_without_start":0,"read_failed":0,"in_flight_evicted":0},"disks":[],"diskstats":[],"logical_writes":[],"dstate_now":[],"dstate_time":[],"names":[]}}"#,
        "\n"
    );
    std::fs::write(&path, v1).unwrap();
    let (back, notes) = replay(std::slice::from_ref(&path));
    assert_eq!(back[0], block(), "pid read as the thread id");
    assert!(
        matches!(&back[1], Input::Sample(s) if s.now_ns == 1_000 && s.host == HostSample::default()),
        "recorded before the host figures: none of them"
    );
    assert!(
        matches!(
            notes[..],
            [Note {
                mark: Mark::Early { .. },
                ..
            }]
        ),
        "no final sample: {notes:?}"
    );
    // Its last line cut short, or a line damaged in the middle.
    std::fs::write(&path, &v1[..v1.len() - 20]).unwrap();
    let (back, notes) = replay(std::slice::from_ref(&path));
    assert_eq!(back.len(), 1);
    assert!(
        matches!(
            notes[..],
            [Note {
                mark: Mark::Cut { .. },
                ..
            }]
        ),
        "{notes:?}"
    );
    std::fs::write(&path, v1.replacen("\"Write\"", "\"Wr!te\"", 1)).unwrap();
    let (_, notes) = replay(std::slice::from_ref(&path));
    assert!(
        matches!(&notes[..], [Note { mark: Mark::Damaged { reason, .. }, .. }] if reason.starts_with("line 2:")),
        "{notes:?}"
    );
}

#[test]
fn bad_files_get_clear_errors() {
    let dir = temp("bad");
    let path = dir.join("bad");
    let open = |path: &Path| Replayer::open(&[path.to_path_buf()]).err();
    assert!(matches!(open(&path), Some(RecordingError::Open { .. })));
    std::fs::write(&path, "").unwrap();
    assert!(matches!(open(&path), Some(RecordingError::Empty { .. })));
    std::fs::write(&path, "\u{0}\u{1}garbage\n").unwrap();
    assert!(matches!(
        open(&path),
        Some(RecordingError::NotARecording { .. })
    ));
    let header = serde_json::to_string(&new_header("h".into(), "k".into(), 0, 0, 1))
        .unwrap()
        .replace(&format!(r#""version":{FORMAT_VERSION}"#), r#""version":99"#);
    std::fs::write(&path, header + "\n").unwrap();
    assert!(matches!(
        open(&path),
        Some(RecordingError::Version { found: 99, .. })
    ));
    std::fs::write(&path, b"IOTOPBPF\x10\x00").unwrap();
    assert!(matches!(
        open(&path),
        Some(RecordingError::CorruptAt { .. })
    ));
    // Parts of different runs, or a single recording among parts.
    let dir = temp("bad-set");
    let a = dir.join("a.rec");
    let b = dir.join("b.rec");
    record(&a, &run(1, 1, true));
    record(&b, &run(1, 1, true));
    let err = Replayer::open(&[a, b]).err().unwrap().to_string();
    assert!(err.contains("not a part of a rotated recording"), "{err}");
}

// The recorder on disks that fill up, fall behind or hang, and rotation.
mod disks;
