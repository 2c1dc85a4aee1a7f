//! Kernel stack symbolization from /proc/kallsyms (loaded once, binary-searched).

use std::fs;

/// Frames that say nothing about what a task waits for: the scheduler itself and the
/// tracing machinery that took the stack.
const UNINFORMATIVE: &[&str] = &[
    "__schedule",
    "schedule",
    "schedule_idle",
    "preempt_schedule",
    "preempt_schedule_common",
    "bpf_trace_run",
    "bpf_get_stackid",
];

pub struct Kallsyms {
    /// (address, name), sorted by address; text symbols only.
    symbols: Vec<(u64, String)>,
}

impl Kallsyms {
    pub fn load() -> Self {
        Self::parse(&fs::read_to_string("/proc/kallsyms").unwrap_or_default())
    }

    pub fn parse(text: &str) -> Self {
        let mut symbols: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                let kind = parts.next()?;
                let name = parts.next()?;
                (addr != 0 && matches!(kind, "t" | "T" | "w" | "W"))
                    .then(|| (addr, name.to_string()))
            })
            .collect();
        symbols.sort_unstable_by_key(|(addr, _)| *addr);
        Self { symbols }
    }

    /// False when addresses are hidden (kptr_restrict) or the file was unreadable.
    pub fn usable(&self) -> bool {
        !self.symbols.is_empty()
    }

    /// The function containing `addr`, or its hex value.
    pub fn symbol(&self, addr: u64) -> String {
        match self.symbols.partition_point(|(a, _)| *a <= addr) {
            0 => format!("{addr:#x}"),
            i => self.symbols[i - 1].1.clone(),
        }
    }

    /// Symbolized frames, innermost first, without the uninformative ones.
    pub fn frames(&self, ips: impl IntoIterator<Item = u64>) -> Vec<String> {
        ips.into_iter()
            .filter(|&ip| ip != 0)
            .map(|ip| self.symbol(ip))
            .filter(|name| !is_uninformative(name))
            .collect()
    }
}

pub fn is_uninformative(frame: &str) -> bool {
    UNINFORMATIVE.contains(&frame)
        || frame.starts_with("__bpf_trace")
        || frame.starts_with("__traceiter")
        || frame.starts_with("bpf_prog_")
        || frame.starts_with("bpf_trace_run")
}

/// Frames of a `/proc/PID/stack` text: `[<0>] io_schedule+0x42/0x70`.
pub fn parse_proc_stack(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let frame = line.split_whitespace().nth(1)?;
            Some(frame.split('+').next().unwrap_or(frame).to_string())
        })
        .filter(|name| !is_uninformative(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "ffffffff81000000 T _stext\n\
        ffffffff81100000 t __schedule\n\
        ffffffff81100400 T schedule\n\
        ffffffff81200000 T io_schedule\n\
        ffffffff81300000 T folio_wait_bit_common\n\
        ffffffff81400000 d some_data\n\
        0000000000000000 T hidden\n";

    #[test]
    fn symbolizes_and_skips_the_scheduler() {
        let syms = Kallsyms::parse(TEXT);
        assert!(syms.usable());
        assert_eq!(syms.symbol(0xffff_ffff_8120_0042), "io_schedule");
        assert_eq!(syms.symbol(0xffff_ffff_8130_0000), "folio_wait_bit_common");
        assert_eq!(syms.symbol(0x10), "0x10");
        let frames = syms.frames([
            0xffff_ffff_8110_0010,
            0xffff_ffff_8110_0410,
            0xffff_ffff_8120_0042,
            0xffff_ffff_8130_0100,
            0,
        ]);
        assert_eq!(frames, vec!["io_schedule", "folio_wait_bit_common"]);
    }

    #[test]
    fn hidden_addresses_are_not_usable() {
        assert!(!Kallsyms::parse("0000000000000000 T schedule\n").usable());
    }

    #[test]
    fn proc_stacks() {
        let text = "[<0>] __schedule+0x2a/0x90\n[<0>] wait_for_vfork_done+0x8e/0x110\n[<0>] kernel_clone+0x1f0/0x3c0\n";
        assert_eq!(
            parse_proc_stack(text),
            vec!["wait_for_vfork_done", "kernel_clone"]
        );
    }
}
