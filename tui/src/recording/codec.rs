//! The binary encoding of model inputs in a recording (formats 3 to 5).
//!
//! A record is `kind: u8`, `length: varint`, then `length` bytes. Block requests, nearly
//! every record of a busy host, get a compact encoding: the task (tgid, tid, comm, kernel
//! thread) and the device are interned (defined once by their own records, then referred to
//! by index), times are deltas, sectors are deltas from the previous request. Everything else
//! (sync calls, D episodes, samples, ...) is rare and stored as JSON. Every field is kept
//! exactly: decoding gives back the very input that was encoded, whatever its values.
//!
//! The encoder and the decoder keep mirrored tables, so the stream must be read from its
//! start; a table that grows past [`MAX_INTERNED`] is reset by a record of its own.
//!
//! Format 5 adds what the recorder says about the stream itself: a gap (inputs it dropped
//! while the disk fell behind; both sides' tables start over after it), that it stopped (a
//! write failed), and that it ended (the run's end, or the next part of a rotated recording).

use crate::model::FastMap;
use crate::model::{BlockIo, Comm, Dev, Dirtier, FileKey, Input, Op};
use crate::varint::{self, put as put_varint};

/// Interned tasks or devices at most; then both tables start over.
pub const MAX_INTERNED: usize = 1 << 16;

const KIND_BLOCK: u8 = 1;
const KIND_TASK: u8 = 2;
const KIND_DEV: u8 = 3;
const KIND_RESET: u8 = 4;
const KIND_JSON: u8 = 5;
/// Format 4: a task with its cgroup, and a request with its dirtier (then, where it has one,
/// the file a readahead read read: optional trailing fields).
const KIND_TASK_IN_CGROUP: u8 = 6;
const KIND_BLOCK_BLAMED: u8 = 7;
/// Format 5: inputs dropped (count, bytes); every table starts over.
const KIND_GAP: u8 = 8;
/// Format 5: the recorder stopped (wall-clock ms, then why, as text).
const KIND_STOP: u8 = 9;
/// Format 5: the stream ends here ([`END_RUN`] or [`END_ROTATED`]).
const KIND_END: u8 = 10;
const END_RUN: u8 = 1;
const END_ROTATED: u8 = 2;

/// What a record holds.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    Input(Input),
    /// A definition or a reset: only the decoder's tables change.
    Nothing,
    /// The recorder dropped `inputs` inputs (`bytes` encoded) here.
    Gap {
        inputs: u64,
        bytes: u64,
    },
    /// The recorder stopped at `unix_ms`, for `reason`.
    Stop {
        unix_ms: u64,
        reason: String,
    },
    /// The stream ends: the run ended, or (`rotated`) it goes on in the next part.
    End {
        rotated: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Task {
    tgid: u32,
    tid: u32,
    comm: Comm,
    kernel_thread: bool,
    /// The cgroup of its requests (0 in format 3).
    cgroup: u64,
}

/// The state both sides keep.
#[derive(Debug, Default)]
struct Tables {
    /// Reference time: the previous block record's completion.
    time: u64,
    sector: u64,
}

#[derive(Debug, Default)]
pub struct Encoder {
    tasks: FastMap<Task, u32>,
    devs: FastMap<Dev, u32>,
    tables: Tables,
}

#[derive(Debug, Default)]
pub struct Decoder {
    tasks: Vec<Task>,
    devs: Vec<Dev>,
    tables: Tables,
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn record(out: &mut Vec<u8>, kind: u8, payload: &[u8]) {
    out.push(kind);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

const fn op_code(op: Op) -> u8 {
    match op {
        Op::Read => 0,
        Op::Write => 1,
        Op::Flush => 2,
        Op::Discard => 3,
        Op::Other => 4,
    }
}

/// The record that says the recorder stopped, and why.
pub fn stop_record(unix_ms: u64, reason: &str) -> Vec<u8> {
    let mut payload = Vec::with_capacity(reason.len() + 10);
    put_varint(&mut payload, unix_ms);
    payload.extend_from_slice(reason.as_bytes());
    let mut out = Vec::with_capacity(payload.len() + 4);
    record(&mut out, KIND_STOP, &payload);
    out
}

/// The record that ends a stream: the run's end, or (`rotated`) the end of one part.
pub fn end_record(rotated: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(3);
    record(
        &mut out,
        KIND_END,
        &[if rotated { END_ROTATED } else { END_RUN }],
    );
    out
}

impl Encoder {
    /// Starts over: the next records define what they use (a new part's start).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Appends a gap of `inputs` dropped inputs (`bytes` encoded) and starts over: what the
    /// dropped records defined is gone with them.
    pub fn gap(&mut self, inputs: u64, bytes: u64, out: &mut Vec<u8>) {
        let mut payload = Vec::with_capacity(20);
        put_varint(&mut payload, inputs);
        put_varint(&mut payload, bytes);
        record(out, KIND_GAP, &payload);
        self.reset();
    }

    /// Appends `input`'s records (and any definitions it needs) to `out`.
    pub fn encode(&mut self, input: &Input, out: &mut Vec<u8>) {
        match input {
            Input::Block(io) => self.block(io, out),
            other => {
                // Infallible: plain data with string keys.
                let json = serde_json::to_vec(other).unwrap_or_default();
                record(out, KIND_JSON, &json);
            }
        }
    }

    fn block(&mut self, io: &BlockIo, out: &mut Vec<u8>) {
        if self.tasks.len() >= MAX_INTERNED || self.devs.len() >= MAX_INTERNED {
            self.tasks.clear();
            self.devs.clear();
            record(out, KIND_RESET, &[]);
        }
        let task = Task {
            tgid: io.tgid,
            tid: io.tid,
            comm: io.comm,
            kernel_thread: io.kernel_thread,
            cgroup: io.cgroup,
        };
        let mut payload = Vec::with_capacity(40);
        let task_index = self.task_index(task, out, &mut payload);
        // A dirtier is interned as a task of its own: its thread and cgroup are not known.
        let dirtier_ref = io.dirtier.map_or(0, |d| {
            let dirtier = Task {
                tgid: d.tgid,
                tid: 0,
                comm: d.comm,
                kernel_thread: false,
                cgroup: 0,
            };
            u64::from(self.task_index(dirtier, out, &mut payload)) + 1
        });
        let dev_index = match self.devs.get(&io.dev) {
            Some(&i) => i,
            None => {
                let i = u32::try_from(self.devs.len()).unwrap_or(u32::MAX);
                put_varint(&mut payload, u64::from(io.dev.major));
                put_varint(&mut payload, u64::from(io.dev.minor));
                record(out, KIND_DEV, &payload);
                payload.clear();
                self.devs.insert(io.dev, i);
                i
            }
        };
        let t = &mut self.tables;
        put_varint(&mut payload, u64::from(task_index));
        put_varint(&mut payload, u64::from(dev_index));
        put_varint(
            &mut payload,
            zigzag(io.sector.wrapping_sub(t.sector) as i64),
        );
        put_varint(&mut payload, u64::from(io.bytes));
        payload.push(op_code(io.op));
        payload.push(io.flags);
        put_varint(&mut payload, zigzag(i64::from(io.error)));
        put_varint(
            &mut payload,
            zigzag(io.completed_ns.wrapping_sub(t.time) as i64),
        );
        put_varint(&mut payload, io.completed_ns.wrapping_sub(io.issued_ns));
        put_varint(&mut payload, io.issued_ns.wrapping_sub(io.created_ns));
        put_varint(&mut payload, dirtier_ref);
        // A readahead read's file, after the fields of format 4: a reader that does not
        // know it stops before it (the fields are read in order, and nothing checks that
        // the payload ends there).
        if let Some(file) = io.file {
            put_varint(&mut payload, u64::from(file.fs_dev.to_kernel()));
            put_varint(&mut payload, file.ino);
        }
        t.sector = io.sector.wrapping_add(u64::from(io.bytes / 512));
        t.time = io.completed_ns;
        record(out, KIND_BLOCK_BLAMED, &payload);
    }

    /// The index of `task`, defining it first if new.
    fn task_index(&mut self, task: Task, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> u32 {
        if let Some(&i) = self.tasks.get(&task) {
            return i;
        }
        let i = u32::try_from(self.tasks.len()).unwrap_or(u32::MAX);
        scratch.clear();
        put_varint(scratch, u64::from(task.tgid));
        put_varint(scratch, u64::from(task.tid));
        scratch.push(u8::from(task.kernel_thread));
        scratch.extend_from_slice(task.comm.raw());
        put_varint(scratch, task.cgroup);
        record(out, KIND_TASK_IN_CGROUP, scratch);
        scratch.clear();
        self.tasks.insert(task, i);
        i
    }
}

/// Reads the fields of one record payload.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Fields<'_> {
    fn varint(&mut self) -> Result<u64, String> {
        varint::read(self.bytes, &mut self.at).map_err(|bad| match bad {
            varint::Bad::Ends => "a record ends in a number".to_string(),
            varint::Bad::TooLong => "a number longer than 64 bits".to_string(),
        })
    }

    fn u32(&mut self) -> Result<u32, String> {
        u32::try_from(self.varint()?).map_err(|_| "a 32-bit field out of range".to_string())
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("a record ends early")?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).ok_or("a length out of range")?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or("a record ends in a string")?;
        self.at = end;
        Ok(s)
    }
}

impl Decoder {
    /// What a record holds. An error says what is wrong with the record.
    pub fn decode(&mut self, kind: u8, payload: &[u8]) -> Result<Decoded, String> {
        let mut f = Fields {
            bytes: payload,
            at: 0,
        };
        match kind {
            KIND_BLOCK => self
                .block(&mut f, false)
                .map(|io| Decoded::Input(Input::Block(io))),
            KIND_BLOCK_BLAMED => self
                .block(&mut f, true)
                .map(|io| Decoded::Input(Input::Block(io))),
            KIND_TASK | KIND_TASK_IN_CGROUP => {
                let tgid = f.u32()?;
                let tid = f.u32()?;
                let kernel_thread = f.byte()? != 0;
                let mut raw = [0u8; 16];
                raw.copy_from_slice(f.take(16)?);
                let comm = Comm::from_bytes(raw);
                let cgroup = if kind == KIND_TASK_IN_CGROUP {
                    f.varint()?
                } else {
                    0
                };
                if self.tasks.len() >= MAX_INTERNED {
                    return Err("more tasks than a table holds".to_string());
                }
                self.tasks.push(Task {
                    tgid,
                    tid,
                    comm,
                    kernel_thread,
                    cgroup,
                });
                Ok(Decoded::Nothing)
            }
            KIND_DEV => {
                let dev = Dev::new(f.u32()?, f.u32()?);
                if self.devs.len() >= MAX_INTERNED {
                    return Err("more devices than a table holds".to_string());
                }
                self.devs.push(dev);
                Ok(Decoded::Nothing)
            }
            KIND_RESET => {
                self.tasks.clear();
                self.devs.clear();
                Ok(Decoded::Nothing)
            }
            KIND_JSON => serde_json::from_slice(payload)
                .map(Decoded::Input)
                .map_err(|e| format!("a record does not parse ({e})")),
            KIND_GAP => {
                let (inputs, bytes) = (f.varint()?, f.varint()?);
                *self = Self::default();
                Ok(Decoded::Gap { inputs, bytes })
            }
            KIND_STOP => {
                let unix_ms = f.varint()?;
                let reason = String::from_utf8_lossy(&payload[f.at..]).into_owned();
                Ok(Decoded::Stop { unix_ms, reason })
            }
            KIND_END => match f.byte()? {
                END_RUN => Ok(Decoded::End { rotated: false }),
                END_ROTATED => Ok(Decoded::End { rotated: true }),
                other => Err(format!("an end of unknown kind {other}")),
            },
            other => Err(format!("unknown record kind {other}")),
        }
    }

    /// A request; `blamed`: format 4, with its dirtier after the fields of format 3.
    fn block(&mut self, f: &mut Fields<'_>, blamed: bool) -> Result<BlockIo, String> {
        let task = *usize::try_from(f.varint()?)
            .ok()
            .and_then(|i| self.tasks.get(i))
            .ok_or("a request of an undefined task")?;
        let dev = *usize::try_from(f.varint()?)
            .ok()
            .and_then(|i| self.devs.get(i))
            .ok_or("a request on an undefined device")?;
        let t = &mut self.tables;
        let sector = t.sector.wrapping_add(unzigzag(f.varint()?) as u64);
        let bytes = f.u32()?;
        let op = Op::from_code(f.byte()?);
        let flags = f.byte()?;
        let error =
            i32::try_from(unzigzag(f.varint()?)).map_err(|_| "an error code out of range")?;
        let completed_ns = t.time.wrapping_add(unzigzag(f.varint()?) as u64);
        let issued_ns = completed_ns.wrapping_sub(f.varint()?);
        let created_ns = issued_ns.wrapping_sub(f.varint()?);
        let dirtier = match if blamed { f.varint()? } else { 0 } {
            0 => None,
            n => {
                let d = usize::try_from(n - 1)
                    .ok()
                    .and_then(|i| self.tasks.get(i))
                    .ok_or("a request written for an undefined task")?;
                Some(Dirtier {
                    tgid: d.tgid,
                    comm: d.comm,
                })
            }
        };
        let file = if blamed && f.at < f.bytes.len() {
            Some(FileKey {
                fs_dev: Dev::from_kernel(f.u32()?),
                ino: f.varint()?,
            })
        } else {
            None
        };
        let t = &mut self.tables;
        t.sector = sector.wrapping_add(u64::from(bytes / 512));
        t.time = completed_ns;
        Ok(BlockIo {
            dev,
            sector,
            bytes,
            op,
            flags,
            tgid: task.tgid,
            tid: task.tid,
            comm: task.comm,
            created_ns,
            issued_ns,
            completed_ns,
            error,
            kernel_thread: task.kernel_thread,
            cgroup: task.cgroup,
            dirtier,
            file,
        })
    }
}

/// Splits the next record off `buf`: `(kind, payload, bytes used)`, or `None` when `buf`
/// does not hold a whole record yet.
pub fn split(buf: &[u8]) -> Option<(u8, &[u8], usize)> {
    let (&kind, rest) = buf.split_first()?;
    let mut len = 0u64;
    let mut used = 1;
    for shift in (0..64).step_by(7) {
        let b = *rest.get(used - 1)?;
        used += 1;
        len |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            let len = usize::try_from(len).ok()?;
            let end = used.checked_add(len)?;
            return buf.get(used..end).map(|payload| (kind, payload, end));
        }
    }
    None
}

#[cfg(test)]
mod tests;
