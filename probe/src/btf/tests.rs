//! The BTF parser on a hand-made blob, and on this kernel's own when it has one.

use super::*;

/// A hand-made BTF blob: `struct s { int a; union { int b; long c; }; int d[2]; }` and
/// `enum e { X = 3 }`.
fn sample() -> Vec<u8> {
    let strings = b"\0int\0s\0a\0b\0c\0d\0e\0X\0long\0btf_trace_t\0".to_vec();
    let at = |name: &str| {
        strings
            .windows(name.len() + 1)
            .position(|w| &w[1..] == name.as_bytes() && w[0] == 0)
            .unwrap() as u32
            + 1
    };
    let mut types: Vec<u32> = Vec::new();
    let mut push = |words: &[u32]| types.extend_from_slice(words);
    push(&[at("int"), KIND_INT << 24, 4, 32]); // 1: int
    push(&[at("long"), KIND_INT << 24, 8, 64]); // 2: long
    push(&[0, (KIND_UNION << 24) | 2, 8, at("b"), 1, 0, at("c"), 2, 0]); // 3: anonymous union
    push(&[0, KIND_ARRAY << 24, 0, 1, 1, 2]); // 4: int[2]
    push(&[
        at("s"),
        (KIND_STRUCT << 24) | 3,
        24,
        at("a"),
        1,
        0,
        0,
        3,
        64,
        at("d"),
        4,
        128,
    ]); // 5
    push(&[at("e"), (KIND_ENUM << 24) | 1, 4, at("X"), 3]); // 6
    // The raw tracepoint t(void *ctx, struct s *arg0, int arg1).
    push(&[0, KIND_PTR << 24, 5]); // 7: struct s *
    push(&[0, (KIND_FUNC_PROTO << 24) | 3, 0, 0, 0, 0, 7, 0, 1]); // 8
    push(&[0, KIND_PTR << 24, 8]); // 9
    push(&[at("btf_trace_t"), KIND_TYPEDEF << 24, 9]); // 10
    let type_bytes: Vec<u8> = types.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut data = vec![0x9f, 0xeb, 1, 0];
    for word in [
        24u32,
        0,
        type_bytes.len() as u32,
        type_bytes.len() as u32,
        strings.len() as u32,
    ] {
        data.extend_from_slice(&word.to_le_bytes());
    }
    data.extend_from_slice(&type_bytes);
    data.extend_from_slice(&strings);
    data
}

#[test]
fn offsets_through_anonymous_unions_and_enum_values() {
    let btf = Btf::parse(&sample()).unwrap();
    assert_eq!(btf.member_offset("s", "a"), Ok(0));
    assert_eq!(
        btf.member_offset("s", "c"),
        Ok(8),
        "inside the anonymous union at bit 64"
    );
    assert_eq!(btf.member_offset("s", "d"), Ok(16));
    assert_eq!(
        btf.member_offset("s", "z"),
        Err(BtfError::NoMember("s".into(), "z".into()))
    );
    assert_eq!(
        btf.member_offset("t", "a"),
        Err(BtfError::NoStruct("t".into()))
    );
    assert_eq!(btf.enum_value("X"), Ok(3));
}

#[test]
fn raw_tracepoint_arguments() {
    let btf = Btf::parse(&sample()).unwrap();
    assert_eq!(btf.raw_tracepoint_arg_struct("t", 0), Ok("s".to_string()));
    assert_eq!(
        btf.raw_tracepoint_arg_struct("t", 1),
        Err(BtfError::NotAStructPointer("t".into(), 1)),
        "an int"
    );
    assert_eq!(
        btf.raw_tracepoint_arg_struct("t", 2),
        Err(BtfError::NotAStructPointer("t".into(), 2)),
        "no such argument"
    );
    assert_eq!(
        btf.raw_tracepoint_arg_struct("u", 0),
        Err(BtfError::NoTracepoint("u".into()))
    );
    assert_eq!(btf.raw_tracepoint_arg_count("t"), Ok(2));
    assert_eq!(
        btf.raw_tracepoint_arg_count("u"),
        Err(BtfError::NoTracepoint("u".into()))
    );
}

#[test]
fn garbage_is_an_error() {
    assert_eq!(Btf::parse(b"nope").err(), Some(BtfError::BadHeader));
    let mut truncated = sample();
    truncated.truncate(40);
    assert!(Btf::parse(&truncated).is_err());
}

/// This kernel's BTF. Skipped with a visible message where it is unreadable, except in
/// CI (`CI=true`), which runs on a kernel that has it: there it is a failure.
pub(crate) fn kernel_btf(test: &str) -> Option<Btf> {
    match Btf::from_sys_fs() {
        Ok(btf) => Some(btf),
        Err(e) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(!ci, "{test}: {e}, and CI=true forbids skipping");
            eprintln!("SKIPPED {test}: {e}");
            None
        }
    }
}

#[test]
fn this_kernels_btf_has_what_the_raw_probes_need() {
    let Some(btf) = kernel_btf("this_kernels_btf_has_what_the_raw_probes_need") else {
        return;
    };
    for (strukt, member) in [
        ("request", "__sector"),
        ("request", "cmd_flags"),
        ("task_struct", "pid"),
        ("task_struct", "comm"),
    ] {
        assert!(
            btf.member_offset(strukt, member).is_ok(),
            "{strukt}.{member}"
        );
    }
    assert_eq!(btf.enum_value("REQ_OP_WRITE"), Ok(1));
    // The direct-I/O call probes key calls by the kiocb both tracepoints take first.
    for tracepoint in ["iomap_dio_rw_begin", "iomap_dio_complete"] {
        assert_eq!(
            btf.raw_tracepoint_arg_struct(tracepoint, 0),
            Ok("kiocb".to_string()),
            "{tracepoint}"
        );
    }
}
