//! Whether this kernel lets the probes see the wait before the request: direct I/O call
//! latency (`iomap_dio_rw_begin` paired with `iomap_dio_complete` by their `struct kiocb *`,
//! checked in BTF) and dirty throttling (`writeback:balance_dirty_pages`, offsets from its
//! tracefs format).

use anyhow::Result;
use iotop_bpf_common::throttle::{DIRTY_BDI_LEN, DirtyOffsets};

use super::{
    btf::Btf,
    tracefs::{EventFormat, Tracefs},
};

/// Whether call latency can be measured: the raw `iomap_dio_rw_begin` probe runs (it notes
/// when calls begin) and both raw tracepoints take the `struct kiocb *` first, on this kernel.
pub fn call_latency(btf: Result<&Btf, &String>, raw_begin: bool) -> Result<(), String> {
    const WHAT: &str = "direct I/O call latency (the wait before the request) is not measured";
    if !raw_begin {
        return Err(format!(
            "{WHAT}: it needs the raw iomap_dio_rw_begin tracepoint (kernel BTF and iomap tracepoints, 6.4+)"
        ));
    }
    let btf = btf.map_err(|e| format!("{WHAT}: {e}"))?;
    for tracepoint in ["iomap_dio_rw_begin", "iomap_dio_complete"] {
        match btf.raw_tracepoint_arg_struct(tracepoint, 0) {
            Ok(name) if name == "kiocb" => {}
            Ok(name) => {
                return Err(format!(
                    "{WHAT}: raw tracepoint {tracepoint} takes a struct {name} first, not the struct kiocb the probes pair calls by"
                ));
            }
            Err(e) => return Err(format!("{WHAT}: kernel BTF: {e}")),
        }
    }
    Ok(())
}

/// The offsets for `writeback:balance_dirty_pages`, or why dirty throttling is not seen.
pub fn dirty(tracefs: &Tracefs) -> Result<Result<DirtyOffsets, String>> {
    Ok(match tracefs.format("writeback", "balance_dirty_pages")? {
        Some(format) => dirty_offsets(&format),
        None => Err(
            "no writeback:balance_dirty_pages tracepoint: buffered writers paused by dirty throttling are not seen"
                .to_string(),
        ),
    })
}

fn dirty_offsets(format: &EventFormat) -> Result<DirtyOffsets, String> {
    let find = |name: &str, size: u32, align: u32| match format.field(name) {
        Some(f) if f.size == size && f.offset % align == 0 => Ok(f.offset),
        Some(f) => Err(format!(
            "writeback:balance_dirty_pages: field {name} is {} bytes at offset {} (expected {size}, {align}-byte aligned): dirty throttling is not seen",
            f.size, f.offset
        )),
        None => Err(format!(
            "writeback:balance_dirty_pages has no field {name}: dirty throttling is not seen"
        )),
    };
    let bdi_len = u32::try_from(DIRTY_BDI_LEN).unwrap_or(u32::MAX);
    Ok(DirtyOffsets {
        bdi: find("bdi", bdi_len, 1)?,
        limit: find("limit", 8, 8)?,
        dirty: find("dirty", 8, 8)?,
        wb_dirty: find("wb_dirty", 8, 8)?,
        pause: find("pause", 8, 8)?,
        _pad: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::{super::tracefs::parse_format, *};

    fn fixture() -> EventFormat {
        let text = std::fs::read_to_string(format!(
            "{}/tests/data/tracefs/6.18/balance_dirty_pages.format",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        parse_format(&text).unwrap()
    }

    #[test]
    fn the_6_18_layout() {
        assert_eq!(
            dirty_offsets(&fixture()),
            Ok(DirtyOffsets {
                bdi: 8,
                limit: 40,
                dirty: 56,
                wb_dirty: 72,
                pause: 112,
                _pad: 0
            })
        );
    }

    #[test]
    fn an_unexpected_layout_is_refused_with_a_reason() {
        let mut format = fixture();
        format.fields.retain(|f| f.name != "pause");
        let err = dirty_offsets(&format).unwrap_err();
        assert!(err.contains("no field pause"), "{err}");
        let mut format = fixture();
        format
            .fields
            .iter_mut()
            .find(|f| f.name == "bdi")
            .unwrap()
            .size = 16;
        let err = dirty_offsets(&format).unwrap_err();
        assert!(err.contains("bdi is 16 bytes"), "{err}");
    }

    #[test]
    fn call_latency_needs_the_raw_begin_probe() {
        let err = call_latency(Err(&"no BTF".to_string()), true).unwrap_err();
        assert!(err.contains("no BTF"), "{err}");
        let err = call_latency(Err(&"no BTF".to_string()), false).unwrap_err();
        assert!(err.contains("raw iomap_dio_rw_begin"), "{err}");
    }
}
