//! The recorder on disks that fill up, fall behind or hang: it never fails or waits, and
//! what it wrote replays; and rotation within a budget.

use super::*;

/// A disk of `room` bytes (then ENOSPC), shared with the test.
#[derive(Clone)]
struct SmallDisk {
    bytes: Arc<Mutex<Vec<u8>>>,
    room: usize,
}

impl Storage for SmallDisk {
    fn create(&mut self, _path: &Path) -> io::Result<Box<dyn Sink>> {
        self.bytes.lock().unwrap().clear();
        Ok(Box::new(self.clone()))
    }

    fn remove(&mut self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for SmallDisk {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut disk = self.bytes.lock().unwrap();
        let fits = self.room.saturating_sub(disk.len()).min(bytes.len());
        disk.extend_from_slice(&bytes[..fits]);
        if fits < bytes.len() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.bytes.lock().unwrap().truncate(len as usize);
        Ok(())
    }
}

#[test]
fn a_full_disk_stops_the_recording_not_the_tool_and_what_was_written_replays() {
    let disk = SmallDisk {
        bytes: Arc::new(Mutex::new(Vec::new())),
        room: 6_000,
    };
    let dir = temp("full");
    let path = dir.join("full.rec");
    let mut recorder =
        Recorder::create_on(Box::new(disk.clone()), &options(&path), &header()).unwrap();
    let watch = recorder.watch();
    let inputs = run(40, 200, true);
    for input in &inputs {
        recorder.input(input); // never fails, never waits
    }
    drop(recorder);
    let state = watch.state();
    let stopped = state.stopped.expect("the recording stopped");
    assert!(
        stopped.reason.contains("No space left on device") && stopped.reason.contains("full.rec"),
        "{stopped:?}"
    );
    let last = state.last_ms.expect("some intervals were written whole");
    let written = disk.bytes.lock().unwrap().clone();
    assert!(written.len() <= 6_000);
    std::fs::write(&path, &written).unwrap();
    let (back, notes) = replay(std::slice::from_ref(&path));
    assert!(intervals(&back) >= 1, "{notes:?}");
    assert_eq!(back[..], inputs[..back.len()]);
    let [note] = &notes[..] else {
        panic!("{notes:?}")
    };
    assert!(
        matches!(&note.mark, Mark::Stopped { reason, .. } if reason.contains("No space left")),
        "the file says why it stops: {note:?}"
    );
    assert_eq!(
        note.replayed_to_ms,
        Some(last),
        "up to the last whole interval"
    );
}

/// A disk that takes the file's head, then nothing until it is let go.
#[derive(Clone, Default)]
struct StuckDisk {
    go: Arc<(Mutex<bool>, Condvar)>,
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl StuckDisk {
    fn release(&self) {
        *self.go.0.lock().unwrap() = true;
        self.go.1.notify_all();
    }
}

impl Storage for StuckDisk {
    fn create(&mut self, _path: &Path) -> io::Result<Box<dyn Sink>> {
        Ok(Box::new(self.clone()))
    }

    fn remove(&mut self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for StuckDisk {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if !self.bytes.lock().unwrap().is_empty() {
            let (lock, cvar) = &*self.go;
            let _go = cvar.wait_while(lock.lock().unwrap(), |go| !*go).unwrap();
        }
        self.bytes.lock().unwrap().extend_from_slice(bytes);
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.bytes.lock().unwrap().truncate(len as usize);
        Ok(())
    }
}

#[test]
fn while_the_disk_falls_behind_events_are_dropped_and_counted_and_every_interval_kept() {
    let disk = StuckDisk::default();
    let dir = temp("behind");
    let path = dir.join("slow.rec");
    let mut recorder =
        Recorder::create_on(Box::new(disk.clone()), &options(&path), &header()).unwrap();
    recorder.set_bound(64 << 10);
    let watch = recorder.watch();
    let inputs = run(20, 1_000, true);
    for input in &inputs {
        recorder.input(input);
    }
    let state = watch.state();
    assert!(state.dropped > 0, "{state:?}");
    assert!(state.stopped.is_none(), "{state:?}");
    disk.release();
    drop(recorder);
    std::fs::write(&path, &*disk.bytes.lock().unwrap()).unwrap();
    let (back, notes) = replay(std::slice::from_ref(&path));
    assert_eq!(
        intervals(&back),
        20,
        "every interval's sample kept: {notes:?}"
    );
    let gaps: u64 = notes
        .iter()
        .map(|n| match n.mark {
            Mark::Gap { inputs } => inputs,
            _ => panic!("{n:?}"),
        })
        .sum();
    let events = |v: &[Input]| v.iter().filter(|i| matches!(i, Input::Block(_))).count();
    assert_eq!(
        gaps, state.dropped,
        "every dropped event counted in the file"
    );
    assert_eq!(events(&back) as u64 + gaps, events(&inputs) as u64);
    assert!(
        notes[0].line().contains("were not recorded"),
        "{}",
        notes[0].line()
    );
}

#[test]
fn a_disk_that_takes_nothing_for_too_long_stops_the_recording() {
    let disk = StuckDisk::default();
    let dir = temp("hung");
    let path = dir.join("hung.rec");
    let mut recorder =
        Recorder::create_on(Box::new(disk.clone()), &options(&path), &header()).unwrap();
    recorder.set_bound(4 << 10);
    let watch = recorder.watch();
    for i in 0..20_000 {
        recorder.input(&sample(i));
    }
    let stopped = watch.state().stopped.expect("stopped");
    assert!(stopped.reason.contains("took nothing"), "{stopped:?}");
    disk.release();
}

#[test]
fn a_rotated_recording_replays_as_one_and_each_part_alone() {
    let dir = temp("rotate");
    let base = dir.join("long.rec");
    let inputs = run(30, 500, true);
    let mut recorder = Recorder::create(
        &Options {
            path: base.clone(),
            max: Some(8 << 20),
        },
        &header(),
    )
    .unwrap();
    // Parts of 1 MiB would take too long to fill here: 4 KiB parts.
    recorder.set_part_max(4 << 10);
    feed_paced(&mut recorder, &inputs);
    drop(recorder);
    assert!(!base.exists(), "only parts are written");
    let parts = replayer_parts(&base);
    assert!(parts.len() >= 3, "{parts:?}");
    // Given in any order, or by the base name, they replay as the live run fed them.
    let mut shuffled = parts.clone();
    shuffled.reverse();
    for given in [shuffled, vec![base.clone()]] {
        let (back, notes) = replay(&given);
        assert_eq!(notes, []);
        assert_eq!(back, inputs);
    }
    // A part alone starts from its own baseline.
    let (alone, notes) = replay(&parts[1..2]);
    assert_eq!(notes, []);
    assert!(
        matches!(&alone[0], Input::Sample(s) if s.kind == SampleKind::Baseline),
        "{:?}",
        alone[0]
    );
    // A part missing from the middle is said, and the rest replays.
    let (_, notes) = replay(&[parts[0].clone(), parts[2].clone()]);
    assert!(
        matches!(
            notes[..],
            [Note {
                mark: Mark::Missing { first: 2, last: 2 },
                ..
            }]
        ),
        "{notes:?}"
    );
}

/// Feeds `inputs` as a live run does, one interval at a time: each written before the next
/// (the writer keeps up), so that parts rotate where they would.
fn feed_paced(recorder: &mut Recorder, inputs: &[Input]) {
    let watch = recorder.watch();
    for input in inputs {
        recorder.input(input);
        if let Input::Sample(s) = input {
            let ms = header().started_unix_ms + (s.now_ns - header().started_ns) / 1_000_000;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while watch.state().last_ms < Some(ms) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }
}

fn replayer_parts(base: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = (1..1_000)
        .map(|n| replayer::part_path(base, n))
        .take_while(|p| p.exists())
        .collect();
    parts.sort();
    parts
}

#[test]
fn rotation_keeps_the_newest_parts_within_the_budget() {
    let dir = temp("budget");
    let base = dir.join("ring.rec");
    let mut recorder = Recorder::create(
        &Options {
            path: base.clone(),
            max: Some(32 << 10),
        },
        &header(),
    )
    .unwrap();
    let inputs = run(60, 500, true);
    feed_paced(&mut recorder, &inputs);
    drop(recorder);
    let mut kept: Vec<PathBuf> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    kept.sort();
    assert!(
        !replayer::part_path(&base, 1).exists(),
        "the oldest went: {kept:?}"
    );
    let total: u64 = kept
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(
        kept.len() as u64 <= recorder::PARTS,
        "{} parts: {kept:?}",
        kept.len()
    );
    // Within the budget, but for the one interval that closes the newest part.
    assert!(total <= (32 << 10) + (4 << 10) * 2, "{total} bytes");
    let (back, notes) = replay(&[base]);
    assert_eq!(notes, []);
    assert!(
        matches!(&back[0], Input::Sample(s) if s.kind == SampleKind::Baseline),
        "the oldest part kept starts with its baseline"
    );
    assert_eq!(back[1..], inputs[inputs.len() - back.len() + 1..]);
}

/// After a failed write the file is cut back: the next write (the stop record) goes at the
/// new end, not after a hole of zeros where the cut bytes were.
#[test]
fn a_file_cut_back_is_written_at_its_new_end() {
    let dir = temp("cut-back");
    let path = dir.join("f");
    let mut sink = writer::Disk.create(&path).unwrap();
    sink.write_all(b"0123456789").unwrap();
    sink.truncate(4).unwrap();
    sink.write_all(b"ab").unwrap();
    drop(sink);
    assert_eq!(std::fs::read(&path).unwrap(), b"0123ab");
}
