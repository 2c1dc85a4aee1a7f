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

/// Text symbols, compact: ~120k of them take ~4.5 MB here, against ~9 MB as a vector of
/// (address, String) pairs.
pub struct Kallsyms {
    /// Sorted addresses, and where each one's name starts in `names` (the next one's start
    /// ends it).
    addrs: Vec<u64>,
    starts: Vec<u32>,
    names: String,
}

impl Kallsyms {
    /// Reads /proc/kallsyms line by line (the whole text is ~12 MB).
    pub fn load() -> Self {
        let Ok(file) = fs::File::open("/proc/kallsyms") else {
            return Self::parse("");
        };
        Self::from_lines(
            std::io::BufRead::lines(std::io::BufReader::new(file)).map_while(Result::ok),
        )
    }

    pub fn parse(text: &str) -> Self {
        Self::from_lines(text.lines().map(str::to_string))
    }

    fn from_lines(lines: impl Iterator<Item = String>) -> Self {
        let mut symbols: Vec<(u64, u32, u32)> = Vec::new();
        let mut names = String::new();
        for line in lines {
            let mut parts = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 || !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let (Ok(start), Ok(len)) = (u32::try_from(names.len()), u32::try_from(name.len()))
            else {
                break;
            };
            names.push_str(name);
            symbols.push((addr, start, len));
        }
        symbols.sort_unstable_by_key(|&(addr, _, _)| addr);
        let mut sorted = String::with_capacity(names.len());
        let mut addrs = Vec::with_capacity(symbols.len());
        let mut starts = Vec::with_capacity(symbols.len() + 1);
        for (addr, start, len) in symbols {
            addrs.push(addr);
            starts.push(u32::try_from(sorted.len()).unwrap_or(u32::MAX));
            sorted.push_str(&names[start as usize..(start + len) as usize]);
        }
        starts.push(u32::try_from(sorted.len()).unwrap_or(u32::MAX));
        Self {
            addrs,
            starts,
            names: sorted,
        }
    }

    /// False when addresses are hidden (kptr_restrict) or the file was unreadable.
    pub fn usable(&self) -> bool {
        !self.addrs.is_empty()
    }

    /// The function containing `addr`, or its hex value.
    pub fn symbol(&self, addr: u64) -> String {
        match self.addrs.partition_point(|&a| a <= addr) {
            0 => format!("{addr:#x}"),
            i => self.names[self.starts[i - 1] as usize..self.starts[i] as usize].to_string(),
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
