//! The threads in D right now, with their stacks, from the task iterator (`dstate_stuck`):
//! run once per interval, it reads every thread of the host in the kernel and writes those
//! in D. No capability beyond the probes' own (reading /proc/TID/stack takes root).

use std::io::Read as _;

use anyhow::{Context as _, Result};
use aya::programs::Iter;
use iotop_bpf_common::dstate::StuckThread;

use crate::Probes;

/// The iterator program.
const PROGRAM: &str = "dstate_stuck";

impl Probes {
    /// Every thread in D now and its stack; `None` where the iterator is not loaded.
    pub fn threads_in_d(&mut self) -> Option<Result<Vec<StuckThread>>> {
        let loaded = self
            .report
            .attached
            .iter()
            .any(|a| a.starts_with("iter:task"));
        loaded.then(|| self.run_iterator())
    }

    fn run_iterator(&mut self) -> Result<Vec<StuckThread>> {
        let program: &mut Iter = self
            .ebpf
            .program_mut(PROGRAM)
            .with_context(|| format!("{PROGRAM} missing"))?
            .try_into()?;
        // A link per run: reading its file runs the program over every task once.
        let link = program.attach()?;
        let mut file = program.take_link(link)?.into_file()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .context("reading the task iterator")?;
        Ok(bytes
            .chunks_exact(size_of::<StuckThread>())
            .map(bytemuck::pod_read_unaligned)
            .collect())
    }
}
