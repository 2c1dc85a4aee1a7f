//! The direct-I/O probe's tracepoint, if this kernel has it (6.4+).

use anyhow::Result;
use iotop_bpf_common::{dio::DioOffsets, tracepoint::ABSENT};

use super::tracefs::Tracefs;

/// The offsets for `iomap:iomap_dio_rw_begin`, or why the probe stays off.
pub fn plan(tracefs: &Tracefs) -> Result<Result<DioOffsets, String>> {
    let Some(format) = tracefs.format("iomap", "iomap_dio_rw_begin")? else {
        return Ok(Err(
            "no iomap:iomap_dio_rw_begin tracepoint (kernel < 6.4): sub-block tail writes and unaligned direct I/O are not detected"
                .to_string(),
        ));
    };
    let mut offsets = DioOffsets::ABSENT;
    for (name, size, slot) in [
        ("dev", 4, &mut offsets.dev),
        ("ino", 8, &mut offsets.ino),
        ("isize", 8, &mut offsets.isize),
        ("pos", 8, &mut offsets.pos),
        ("count", 8, &mut offsets.count),
        ("ki_flags", 4, &mut offsets.ki_flags),
        ("dio_flags", 4, &mut offsets.dio_flags),
    ] {
        match format.field(name) {
            Some(field) if field.size == size && field.offset % size == 0 => *slot = field.offset,
            _ if name == "dio_flags" => *slot = ABSENT,
            _ => {
                return Ok(Err(format!(
                    "iomap:iomap_dio_rw_begin has no usable field {name}: sub-block tail writes are not detected"
                )));
            }
        }
    }
    Ok(Ok(offsets))
}

#[cfg(test)]
mod tests {
    use super::super::tracefs::parse_format;

    #[test]
    fn the_6_18_layout_fits_the_probe_window() {
        let text = std::fs::read_to_string(format!(
            "{}/tests/data/tracefs/6.18/iomap_dio_rw_begin.format",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let format = parse_format(&text).unwrap();
        let pos = format.field("pos").unwrap();
        let flags = format.field("dio_flags").unwrap();
        assert_eq!((pos.offset, pos.size), (32, 8));
        assert!(
            flags.offset + flags.size <= 72,
            "inside the 64 bytes read from offset 8"
        );
    }
}
