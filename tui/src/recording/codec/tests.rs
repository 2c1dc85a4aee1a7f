//! The records' encoding: every input back exactly, small, and garbage an error.

use super::*;
use crate::model::{KernelSample, ProcessExit, SampleKind};

fn block(tgid: u32, sector: u64, at: u64) -> BlockIo {
    BlockIo {
        dev: Dev::new(7, 0),
        sector,
        bytes: 4096,
        op: Op::Write,
        flags: 3,
        tgid,
        tid: tgid + 1,
        comm: Comm::new("fio"),
        created_ns: at,
        issued_ns: at + 2_000,
        completed_ns: at + 90_000,
        error: 0,
        kernel_thread: false,
        cgroup: 0,
        dirtier: None,
        file: None,
    }
}

fn roundtrip(inputs: &[Input]) -> (Vec<Input>, usize) {
    let mut enc = Encoder::default();
    let mut bytes = Vec::new();
    for input in inputs {
        enc.encode(input, &mut bytes);
    }
    let mut dec = Decoder::default();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((kind, payload, used)) = split(&bytes[at..]) {
        if let Decoded::Input(input) = dec.decode(kind, payload).unwrap() {
            out.push(input);
        }
        at += used;
    }
    assert_eq!(at, bytes.len());
    (out, bytes.len())
}

#[test]
fn every_input_comes_back_exactly() {
    let mut absurd = block(1, u64::MAX, 0);
    absurd.created_ns = u64::MAX;
    absurd.issued_ns = 0;
    absurd.completed_ns = 3;
    absurd.error = i32::MIN;
    absurd.bytes = u32::MAX;
    absurd.op = Op::Other;
    absurd.cgroup = u64::MAX;
    let mut written_back = block(12, 4096, 2_000_000);
    written_back.kernel_thread = true;
    written_back.cgroup = 5012;
    written_back.dirtier = Some(Dirtier {
        tgid: 77,
        comm: Comm::new("dd"),
    });
    let mut read_ahead = block(13, 8192, 2_100_000);
    read_ahead.op = Op::Read;
    read_ahead.file = Some(FileKey {
        fs_dev: Dev::new(4095, (1 << 20) - 1),
        ino: u64::MAX,
    });
    let inputs = vec![
        Input::Block(written_back),
        Input::Block(read_ahead),
        Input::Block(block(10, 2048, 1_000_000)),
        Input::Block(block(10, 2056, 1_100_000)),
        Input::Block(absurd),
        Input::Block(block(11, 0, 0)),
        Input::Exit(ProcessExit { tgid: 10, ts_ns: 5 }),
        Input::BadRecords(2),
        Input::Sample(Box::new(KernelSample {
            kind: SampleKind::Final,
            now_ns: 9,
            ..KernelSample::default()
        })),
    ];
    assert_eq!(roundtrip(&inputs).0, inputs);
}

#[test]
fn a_busy_stream_of_requests_is_small_before_compression() {
    let inputs: Vec<Input> = (0..10_000u64)
        .map(|i| Input::Block(block(100 + (i % 4) as u32, i * 8 % 100_000, i * 4_000)))
        .collect();
    let (out, bytes) = roundtrip(&inputs);
    assert_eq!(out, inputs);
    assert!(
        bytes / inputs.len() <= 24,
        "{} bytes per request",
        bytes / inputs.len()
    );
}

#[test]
fn a_gap_starts_both_sides_over_and_the_stream_says_how_it_ended() {
    let mut enc = Encoder::default();
    let mut kept = Vec::new();
    enc.encode(&Input::Block(block(10, 8, 1_000)), &mut kept);
    // Records the recorder dropped: they defined a task the decoder never sees.
    let mut dropped = Vec::new();
    enc.encode(&Input::Block(block(11, 16, 2_000)), &mut dropped);
    enc.gap(1, dropped.len() as u64, &mut kept);
    enc.encode(&Input::Block(block(11, 24, 3_000)), &mut kept);
    kept.extend(stop_record(1_795_305_600_000, "No space left on device"));
    kept.extend(end_record(true));
    let mut dec = Decoder::default();
    let mut got = Vec::new();
    let mut buf = &kept[..];
    while let Some((kind, payload, used)) = split(buf) {
        match dec.decode(kind, payload).unwrap() {
            Decoded::Nothing => {}
            other => got.push(other),
        }
        buf = &buf[used..];
    }
    assert_eq!(
        got,
        [
            Decoded::Input(Input::Block(block(10, 8, 1_000))),
            Decoded::Gap {
                inputs: 1,
                bytes: dropped.len() as u64
            },
            Decoded::Input(Input::Block(block(11, 24, 3_000))),
            Decoded::Stop {
                unix_ms: 1_795_305_600_000,
                reason: "No space left on device".into()
            },
            Decoded::End { rotated: true },
        ]
    );
}

#[test]
fn tables_start_over_when_full() {
    let inputs: Vec<Input> = (0..(MAX_INTERNED as u32 + 10))
        .map(|i| Input::Block(block(i, 0, u64::from(i))))
        .collect();
    assert_eq!(roundtrip(&inputs).0, inputs);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let mut dec = Decoder::default();
    assert!(dec.decode(KIND_BLOCK, &[0, 0]).is_err(), "undefined task");
    assert!(dec.decode(KIND_TASK, &[0xff; 20]).is_err());
    assert!(dec.decode(99, &[]).is_err());
    assert!(dec.decode(KIND_JSON, b"{").is_err());
    assert_eq!(split(&[KIND_BLOCK, 0x85]), None, "a length without its end");
    assert_eq!(split(&[KIND_BLOCK, 5, 1, 2]), None, "a record cut short");
    for bytes in crate::fuzz::garbage(0..200) {
        let _ = split(&bytes);
        let _ = dec.decode(bytes.first().copied().unwrap_or(0) % 11, &bytes);
    }
}

/// Format 3 wrote tasks without a cgroup and requests without a dirtier: they still read.
#[test]
fn format_3_requests_still_decode() {
    let mut out = Vec::new();
    let mut task = Vec::new();
    put_varint(&mut task, 42);
    put_varint(&mut task, 43);
    task.push(0);
    task.extend_from_slice(Comm::new("lab001").raw());
    record(&mut out, KIND_TASK, &task);
    record(&mut out, KIND_DEV, &[7, 0]);
    let mut request = Vec::new();
    for v in [0u64, 0, zigzag(8), 4096] {
        put_varint(&mut request, v);
    }
    request.extend_from_slice(&[1, 0]);
    for v in [zigzag(0), zigzag(90), 70, 10] {
        put_varint(&mut request, v);
    }
    record(&mut out, KIND_BLOCK, &request);
    let mut decoder = Decoder::default();
    let mut inputs = Vec::new();
    let mut buf = &out[..];
    while let Some((kind, payload, used)) = split(buf) {
        if let Decoded::Input(input) = decoder.decode(kind, payload).unwrap() {
            inputs.push(input);
        }
        buf = &buf[used..];
    }
    let [Input::Block(io)] = inputs.as_slice() else {
        panic!("one request: {inputs:?}")
    };
    assert_eq!(
        (
            io.tgid,
            io.tid,
            io.sector,
            io.bytes,
            io.completed_ns - io.created_ns
        ),
        (42, 43, 8, 4096, 80)
    );
    assert_eq!((io.cgroup, io.dirtier), (0, None));
}
