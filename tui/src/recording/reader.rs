//! One recording file, read record by record, to wherever it ends: its end, the end of its last
//! whole frame, or the damage that stops it. A file that ends in the middle of a frame (the
//! tool was killed while writing it) is *cut*; a frame that does not decompress, fails its
//! checksum or holds a record that does not decode, with the file going on after it, is
//! *damaged*. Both stop the reading cleanly: everything before is read, and the [`Mark`] says
//! where it stopped.
//!
//! Format 5 is a sequence of zstd frames, one per interval (or per MiB of records), each with
//! its checksum: a frame's records are read only once the whole frame decompressed and its
//! checksum held, so a damaged frame gives no record at all. Formats 3 and 4 are one long
//! frame, flushed at each interval, read as it decompresses. Formats 1 and 2 are JSON lines.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Read, Seek as _, SeekFrom},
    path::Path,
};

use zstd::stream::raw::{Decoder as Zstd, InBuffer, Operation as _, OutBuffer};

use super::{
    BINARY_MAGIC, Header, RecordingError, check_header,
    codec::{self, Decoded},
};

/// Where and why a file's records stop before its end, or what it says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// The recorder dropped `inputs` inputs here (the disk fell behind).
    Gap { inputs: u64 },
    /// The recorder stopped at `unix_ms` (a write failed): what came before is whole.
    Stopped { unix_ms: u64, reason: String },
    /// The file stops after a whole frame without saying it ended: the tool was killed
    /// between two writes, or its host went down. `at`: the file's length.
    Early { at: u64 },
    /// The file ends inside the frame that starts at byte `frame`: the tool was killed while
    /// writing it. `at`: the file's length.
    Cut { at: u64, frame: u64 },
    /// Damaged at byte `at` (a bit flipped, bytes lost or overwritten), the file going on
    /// after it.
    Damaged { at: u64, reason: String },
    /// Parts `first` to `last` of a rotated recording are not among the files given.
    Missing { first: u32, last: u32 },
}

/// The zstd frame magic number, as it is on disk.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The most a format 5 frame decompresses to: the recorder closes a frame at each interval
/// or past 1 MiB of records (one sample can add a few MiB on a host with many processes).
const MAX_FRAME: usize = 64 << 20;

/// One file of a recording.
pub struct Part {
    pub header: Header,
    body: Body,
}

enum Body {
    Lines(Lines),
    Frames(Box<Frames>),
}

impl Part {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path) -> Result<Self, RecordingError> {
        let open_err = |error| RecordingError::Open {
            path: path.into(),
            error,
        };
        let mut file = File::open(path).map_err(open_err)?;
        let mut magic = [0u8; 8];
        let got = read_full(&mut file, &mut magic).map_err(|error| RecordingError::Read {
            path: path.into(),
            error,
        })?;
        if got == 0 {
            return Err(RecordingError::Empty { path: path.into() });
        }
        if got == magic.len() && &magic == BINARY_MAGIC {
            return Self::open_binary(path, file);
        }
        // JSON lines (formats 1 and 2): read again from the start.
        file.seek(SeekFrom::Start(0)).map_err(open_err)?;
        let mut lines = Lines {
            reader: BufReader::new(file),
            line: 0,
            at: 0,
        };
        let header = match lines.next_line() {
            Some(Ok((first, _))) => serde_json::from_str(&first).ok(),
            _ => None,
        };
        let header = check_header(path, header)?;
        Ok(Self {
            header,
            body: Body::Lines(lines),
        })
    }

    fn open_binary(path: &Path, mut file: File) -> Result<Self, RecordingError> {
        let truncated = || RecordingError::CorruptAt {
            path: path.into(),
            offset: 8,
            reason: "the header is cut short".to_string(),
        };
        let mut len = [0u8; 4];
        file.read_exact(&mut len).map_err(|_| truncated())?;
        let len = u32::from_le_bytes(len);
        if len > 1 << 20 {
            return Err(RecordingError::NotARecording { path: path.into() });
        }
        let mut header = vec![0u8; len as usize];
        file.read_exact(&mut header).map_err(|_| truncated())?;
        let header = check_header(path, serde_json::from_slice(&header).ok())?;
        let zstd = Zstd::new().map_err(|error| RecordingError::Read {
            path: path.into(),
            error,
        })?;
        let start = 12 + u64::from(len);
        let frames = Frames {
            file,
            zstd,
            input: vec![0; 1 << 16].into_boxed_slice(),
            in_pos: 0,
            in_len: 0,
            fed: start,
            frame_start: start,
            in_frame: false,
            flushing: false,
            file_eof: false,
            out: Vec::with_capacity(1 << 17),
            start: 0,
            ready: 0,
            ready_frame: start,
            buffered: header.version >= 5,
            decoder: codec::Decoder::default(),
            records: 0,
        };
        Ok(Self {
            header,
            body: Body::Frames(Box::new(frames)),
        })
    }

    /// Bytes of the file read so far (its length, once read to its end).
    pub fn offset(&self) -> u64 {
        match &self.body {
            Body::Lines(lines) => lines.at,
            Body::Frames(frames) => frames.fed,
        }
    }

    /// The next record's content; `Ok(None)` at the end of whole data (the end of the last
    /// whole frame or line); `Err` where the data stops being whole.
    pub fn next(&mut self) -> Result<Option<Decoded>, Mark> {
        match &mut self.body {
            Body::Lines(lines) => lines.next(),
            Body::Frames(frames) => frames.next(),
        }
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Formats 1 and 2: one JSON object a line.
struct Lines {
    reader: BufReader<File>,
    line: usize,
    /// Bytes read before the next line.
    at: u64,
}

impl Lines {
    /// The next line without its newline, and whether it had one.
    fn next_line(&mut self) -> Option<std::io::Result<(String, bool)>> {
        let mut text = String::new();
        match self.reader.read_line(&mut text) {
            Ok(0) => None,
            Ok(n) => {
                self.line += 1;
                self.at += n as u64;
                let whole = text.ends_with('\n');
                if whole {
                    text.pop();
                }
                Some(Ok((text, whole)))
            }
            Err(e) => Some(Err(e)),
        }
    }

    fn next(&mut self) -> Result<Option<Decoded>, Mark> {
        let before = self.at;
        let Some(line) = self.next_line() else {
            return Ok(None);
        };
        let (text, whole) = line.map_err(|e| Mark::Damaged {
            at: before,
            reason: format!("line {}: {e}", self.line + 1),
        })?;
        match serde_json::from_str(&text) {
            Ok(input) => Ok(Some(Decoded::Input(input))),
            // The last line, without its newline: the writer was stopped in it.
            Err(_) if !whole => Err(Mark::Cut {
                at: self.at,
                frame: before,
            }),
            Err(e) => Err(Mark::Damaged {
                at: before,
                reason: format!("line {}: {e}", self.line),
            }),
        }
    }
}

/// The zstd frames of formats 3 to 5, decompressed as they are read.
struct Frames {
    file: File,
    zstd: Zstd<'static>,
    input: Box<[u8]>,
    in_pos: usize,
    in_len: usize,
    /// The file offset just past the last byte given to zstd.
    fed: u64,
    /// Where the frame being decompressed starts.
    frame_start: u64,
    /// Bytes of a frame were given to zstd since the last frame ended.
    in_frame: bool,
    /// zstd filled the output: it may hold more before it needs input.
    flushing: bool,
    file_eof: bool,
    /// Decompressed bytes: `out[start..ready]` may be decoded.
    out: Vec<u8>,
    start: usize,
    ready: usize,
    /// Where the frame of `out[..ready]` starts (format 5).
    ready_frame: u64,
    /// Format 5: records are decoded only from whole, verified frames.
    buffered: bool,
    decoder: codec::Decoder,
    records: u64,
}

/// What one step of decompression did.
enum Step {
    More,
    /// The data ended at the end of a whole frame.
    End,
}

impl Frames {
    fn next(&mut self) -> Result<Option<Decoded>, Mark> {
        loop {
            let end = if self.buffered {
                self.ready
            } else {
                self.out.len()
            };
            if let Some((kind, payload, used)) = codec::split(&self.out[self.start..end]) {
                self.start += used;
                self.records += 1;
                let at = if self.buffered {
                    self.ready_frame
                } else {
                    self.fed
                };
                let records = self.records;
                return self
                    .decoder
                    .decode(kind, payload)
                    .map(Some)
                    .map_err(|reason| Mark::Damaged {
                        at,
                        reason: format!("record {records}: {reason}"),
                    });
            }
            if self.buffered && self.start < self.ready {
                return Err(Mark::Damaged {
                    at: self.ready_frame,
                    reason: "a frame ends inside a record".to_string(),
                });
            }
            self.out.drain(..self.start);
            // Buffered, `start == ready` here; unbuffered (format 4), `ready` only marks
            // frame ends and may lag `start`.
            self.ready = self.ready.saturating_sub(self.start);
            self.start = 0;
            if let Step::End = self.step()? {
                if self.start < self.out.len() {
                    return Err(Mark::Damaged {
                        at: self.fed,
                        reason: "the data ends inside a record".to_string(),
                    });
                }
                return Ok(None);
            }
        }
    }

    /// Gives zstd more of the file, or lets it flush what it holds.
    fn step(&mut self) -> Result<Step, Mark> {
        if self.in_pos == self.in_len && !self.flushing {
            if self.file_eof {
                return self.at_eof();
            }
            match self.file.read(&mut self.input) {
                Ok(0) => {
                    self.file_eof = true;
                    return self.at_eof();
                }
                Ok(n) => (self.in_pos, self.in_len) = (0, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(Step::More),
                Err(e) => {
                    return Err(Mark::Damaged {
                        at: self.fed,
                        reason: format!("it cannot be read: {e}"),
                    });
                }
            }
        }
        self.out.reserve(1 << 17);
        let mut input = InBuffer::around(&self.input[self.in_pos..self.in_len]);
        let len = self.out.len();
        let mut output = OutBuffer::around_pos(&mut self.out, len);
        let result = self.zstd.run(&mut input, &mut output);
        let (used, wrote, full) = (
            input.pos(),
            output.pos() - len,
            output.pos() == output.capacity(),
        );
        self.in_pos += used;
        self.fed += used as u64;
        let left = match result {
            Ok(left) => left,
            Err(e) => {
                return Err(Mark::Damaged {
                    at: self.frame_start,
                    reason: format!("a frame does not decompress ({e})"),
                });
            }
        };
        self.flushing = left != 0 && full;
        self.in_frame |= used > 0 || wrote > 0;
        if left == 0 && self.in_frame {
            // A whole frame, its checksum verified.
            self.in_frame = false;
            self.ready = self.out.len();
            self.ready_frame = self.frame_start;
            self.frame_start = self.fed;
        }
        if self.buffered && self.out.len() - self.ready > MAX_FRAME {
            return Err(Mark::Damaged {
                at: self.frame_start,
                reason: "a frame larger than the recorder writes".to_string(),
            });
        }
        Ok(Step::More)
    }

    /// The file ended: at the end of a whole frame, or inside one (cut, or damaged if the
    /// frame ran on into the frames after it).
    fn at_eof(&mut self) -> Result<Step, Mark> {
        if !self.in_frame {
            return Ok(Step::End);
        }
        if self.buffered && self.frame_follows() {
            return Err(Mark::Damaged {
                at: self.frame_start,
                reason: "a frame does not end where the next one begins".to_string(),
            });
        }
        Err(Mark::Cut {
            at: self.fed,
            frame: self.frame_start,
        })
    }

    /// Whether another frame starts after the one being read: then it was not cut short, a
    /// size in it is damaged.
    fn frame_follows(&mut self) -> bool {
        let mut reader = BufReader::new(&self.file);
        if reader
            .seek(SeekFrom::Start(self.frame_start + ZSTD_MAGIC.len() as u64))
            .is_err()
        {
            return false;
        }
        let mut window = [0u8; 4];
        let mut byte = [0u8; 1];
        while let Ok(1) = reader.read(&mut byte) {
            window.rotate_left(1);
            window[3] = byte[0];
            if window == ZSTD_MAGIC {
                return true;
            }
        }
        false
    }
}
