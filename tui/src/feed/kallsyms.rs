//! Kernel stack symbolization from /proc/kallsyms (loaded once, binary-searched).

use std::fs;

/// Frames that say nothing about what a task waits for: the scheduler itself, the tracing
/// machinery that took the stack, and arm64's way from user space into a system call (six
/// frames below every call there, seen in a D episode on Debian's arm64 6.1).
const UNINFORMATIVE: &[&str] = &[
    "__schedule",
    "schedule",
    "schedule_idle",
    "preempt_schedule",
    "preempt_schedule_common",
    "bpf_trace_run",
    "bpf_get_stackid",
    "invoke_syscall",
    "el0_svc_common",
    "do_el0_svc",
    "el0_svc",
    "el0t_64_sync_handler",
    "el0t_64_sync",
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
    /// Reads /proc/kallsyms line by line into one buffer (the whole text is ~12 MB).
    pub fn load() -> Self {
        let Ok(file) = fs::File::open("/proc/kallsyms") else {
            return Self::parse("");
        };
        let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
        let mut line = String::new();
        let mut builder = Builder::default();
        while std::io::BufRead::read_line(&mut reader, &mut line).is_ok_and(|n| n > 0) {
            if !builder.add(&line) {
                break;
            }
            line.clear();
        }
        builder.finish()
    }

    /// Whether kernel addresses are hidden (kptr_restrict): the first line says, without
    /// reading the rest.
    pub fn hidden() -> bool {
        let Ok(file) = fs::File::open("/proc/kallsyms") else {
            return true;
        };
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut line);
        line.split_whitespace()
            .next()
            .is_none_or(|addr| u64::from_str_radix(addr, 16).is_ok_and(|a| a == 0))
    }

    /// Loads in a thread of its own (~40 ms here, more on a busy host): only stacks need
    /// it, so the first frame does not wait for it.
    pub fn load_in_background() -> std::thread::JoinHandle<Self> {
        std::thread::spawn(|| {
            let kallsyms = Self::load();
            // The text and the unsorted table are freed by now, in this thread's own
            // malloc arena: give the pages back.
            crate::heap::trim();
            kallsyms
        })
    }

    pub fn parse(text: &str) -> Self {
        let mut builder = Builder::default();
        for line in text.lines() {
            if !builder.add(line) {
                break;
            }
        }
        builder.finish()
    }
}

/// Kallsyms under construction.
#[derive(Default)]
struct Builder {
    symbols: Vec<(u64, u32, u32)>,
    names: String,
}

impl Builder {
    /// Adds one line; `false` when the names outgrow their u32 offsets.
    fn add(&mut self, line: &str) -> bool {
        let (symbols, names) = (&mut self.symbols, &mut self.names);
        {
            let mut parts = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                return true;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                return true;
            };
            // ARM's mapping symbols (`$x` code, `$d` data) mark where a module's code and
            // data begin, inside functions: they are nobody's name.
            if addr == 0 || !matches!(kind, "t" | "T" | "w" | "W") || name.starts_with('$') {
                return true;
            }
            let (Ok(start), Ok(len)) = (u32::try_from(names.len()), u32::try_from(name.len()))
            else {
                return false;
            };
            names.push_str(name);
            symbols.push((addr, start, len));
        }
        true
    }

    fn finish(self) -> Kallsyms {
        let Self { mut symbols, names } = self;
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
        Kallsyms {
            addrs,
            starts,
            names: sorted,
        }
    }
}

impl Kallsyms {
    /// No symbols: /proc/kallsyms shows every address as zero (`kptr_restrict`, or no
    /// CAP_SYSLOG) or could not be read.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
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
    // A compiler's copy of a function (`el0_svc_common.constprop.0`) is that function.
    let function = frame.split('.').next().unwrap_or(frame);
    UNINFORMATIVE.contains(&function)
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
        assert!(!syms.addrs.is_empty());
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
    fn arm_mapping_symbols_name_nothing() {
        // An arm64 module's text: `$x` marks the start of code inside ext4_sync_file.
        let syms = Kallsyms::parse(
            "ffff800001200000 t ext4_sync_file\t[ext4]\n\
             ffff800001200040 t $x\t[ext4]\n\
             ffff800001200800 t $d\t[ext4]\n\
             ffff800001201000 t ext4_file_write_iter\t[ext4]\n",
        );
        assert_eq!(syms.symbol(0xffff_8000_0120_0100), "ext4_sync_file");
        assert_eq!(syms.symbol(0xffff_8000_0120_0900), "ext4_sync_file");
        assert_eq!(syms.symbol(0xffff_8000_0120_1010), "ext4_file_write_iter");
    }

    #[test]
    fn arm64_system_call_entry_is_not_a_wait_site() {
        // A vfork parent's /proc/PID/stack on Debian's arm64 6.1 (wait_for_vfork_done is
        // inlined into kernel_clone there).
        let text = "[<0>] kernel_clone+0x240/0x4b0\n[<0>] __do_sys_clone+0x74/0xb0\n\
            [<0>] __arm64_sys_clone+0x28/0x34\n[<0>] invoke_syscall+0x68/0xe0\n\
            [<0>] el0_svc_common.constprop.0+0xd4/0xf4\n[<0>] do_el0_svc+0x2c/0x9c\n\
            [<0>] el0_svc+0x34/0xdc\n[<0>] el0t_64_sync_handler+0xf4/0x120\n\
            [<0>] el0t_64_sync+0x18c/0x190\n";
        assert_eq!(
            parse_proc_stack(text),
            vec!["kernel_clone", "__do_sys_clone", "__arm64_sys_clone"]
        );
    }

    #[test]
    fn hidden_addresses_are_not_usable() {
        assert!(
            Kallsyms::parse("0000000000000000 T schedule\n")
                .addrs
                .is_empty()
        );
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
