//! tracefs: finding (or mounting) it, and parsing tracepoint `format` files.
//!
//! Field offsets of classic tracepoints change between kernels (`rwbs` grew from 8 to 10
//! bytes, an `ioprio` field was inserted), so the probes never hard-code them: they are read
//! here at start-up and handed to the eBPF programs.

use std::{
    fs,
    path::{Path, PathBuf},
};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TracefsError {
    #[error(
        "tracefs is not mounted and mounting it at /sys/kernel/tracing failed ({0}); mount it with: mount -t tracefs nodev /sys/kernel/tracing"
    )]
    NotMounted(std::io::Error),
    /// Mounting needs CAP_SYS_ADMIN, which the process does not have.
    #[error(
        "tracefs is not mounted, and mounting it needs root or CAP_SYS_ADMIN: mount it once with: mount -t tracefs nodev /sys/kernel/tracing"
    )]
    NotMountedNoPrivilege,
    /// Mounted, but its directories are closed to this process (tracefs is mode 0700, owned
    /// by root, on recent kernels).
    #[error(
        "tracefs is mounted at {} but this process cannot read it (mode {mode:o}, owner uid {uid}): reading its tracepoint formats needs root or CAP_DAC_READ_SEARCH", root.display()
    )]
    Unreadable { root: PathBuf, mode: u32, uid: u32 },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: malformed format file: {reason}")]
    Malformed { path: PathBuf, reason: String },
}

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Field {
    pub name: String,
    /// The C declaration without the name, e.g. `char[10]`, `dev_t`, `__data_loc char[]`.
    pub c_type: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
}

/// A parsed `events/<category>/<name>/format` file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventFormat {
    pub name: String,
    pub id: u32,
    pub fields: Vec<Field>,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Parses the text of a `format` file.
pub fn parse_format(text: &str) -> Result<EventFormat, String> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("name:") {
            name = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("ID:") {
            id = Some(
                rest.trim()
                    .parse::<u32>()
                    .map_err(|e| format!("bad ID {rest:?}: {e}"))?,
            );
        } else if line.starts_with("field:") {
            fields.push(parse_field(line)?);
        }
    }
    Ok(EventFormat {
        name: name.ok_or("no name: line")?,
        id: id.ok_or("no ID: line")?,
        fields,
    })
}

/// `field:char rwbs[10];<TAB>offset:34;<TAB>size:10;<TAB>signed:0;`
fn parse_field(line: &str) -> Result<Field, String> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once(':')
            .ok_or_else(|| format!("bad part {part:?}"))?;
        let number = || {
            value
                .trim()
                .parse::<u32>()
                .map_err(|e| format!("bad {key} {value:?}: {e}"))
        };
        match key {
            "field" => decl = Some(value.trim()),
            "offset" => offset = Some(number()?),
            "size" => size = Some(number()?),
            "signed" => signed = number()? != 0,
            _ => {}
        }
    }
    let decl = decl.ok_or_else(|| format!("no declaration in {line:?}"))?;
    // The name is the last identifier, before any array suffix: `char rwbs[10]`,
    // `__data_loc char[] cmd`.
    let (c_type, name) = decl
        .rsplit_once(' ')
        .ok_or_else(|| format!("bad declaration {decl:?}"))?;
    let (name, array) = match name.find('[') {
        Some(at) => (&name[..at], &name[at..]),
        None => (name, ""),
    };
    Ok(Field {
        name: name.to_string(),
        c_type: format!("{c_type}{array}"),
        offset: offset.ok_or_else(|| format!("no offset in {line:?}"))?,
        size: size.ok_or_else(|| format!("no size in {line:?}"))?,
        signed,
    })
}

/// A located tracefs mount.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

    /// Finds tracefs, mounting it at /sys/kernel/tracing when it is not mounted (it is not at
    /// boot on some systems) and `may_mount` (the process has CAP_SYS_ADMIN). A tracefs that
    /// is mounted but closed to this process is told apart from a missing one.
    pub fn locate_or_mount(may_mount: bool) -> Result<Self, TracefsError> {
        if let Some(found) = Self::locate() {
            return Ok(found);
        }
        if let Some(err) = Self::unreadable() {
            return Err(err);
        }
        if !may_mount {
            return Err(TracefsError::NotMountedNoPrivilege);
        }
        mount_tracefs(Path::new(Self::CANDIDATES[0])).map_err(TracefsError::NotMounted)?;
        Self::locate().ok_or_else(|| {
            TracefsError::NotMounted(std::io::Error::other("mounted, but events/ is still empty"))
        })
    }

    /// Finds a mounted tracefs without changing anything.
    pub fn locate() -> Option<Self> {
        Self::CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|root| root.join("events/block").is_dir())
            .map(|root| Self { root })
    }

    /// A candidate that is a tracefs mount this process may not enter.
    fn unreadable() -> Option<TracefsError> {
        use std::os::unix::fs::MetadataExt as _;
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        Self::CANDIDATES.iter().find_map(|candidate| {
            let mounted = mounts.lines().any(|line| {
                let mut fields = line.split_whitespace();
                let (_, target, kind) = (fields.next(), fields.next(), fields.next());
                target == Some(candidate) && kind == Some("tracefs")
            });
            let root = PathBuf::from(candidate);
            match fs::read_dir(root.join("events")) {
                Err(e) if mounted && e.kind() == std::io::ErrorKind::PermissionDenied => {
                    let meta = fs::metadata(&root).ok()?;
                    Some(TracefsError::Unreadable {
                        root,
                        mode: meta.mode() & 0o7777,
                        uid: meta.uid(),
                    })
                }
                _ => None,
            }
        })
    }

    #[cfg(test)]
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The format of `category:name`, or `None` when this kernel has no such tracepoint.
    pub fn format(&self, category: &str, name: &str) -> Result<Option<EventFormat>, TracefsError> {
        let path = self
            .root
            .join("events")
            .join(category)
            .join(name)
            .join("format");
        match fs::read_to_string(&path) {
            Ok(text) => parse_format(&text)
                .map(Some)
                .map_err(|reason| TracefsError::Malformed { path, reason }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(TracefsError::Read { path, source }),
        }
    }
}

fn mount_tracefs(target: &Path) -> std::io::Result<()> {
    use std::{ffi::CString, os::unix::ffi::OsStrExt};
    let target = CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: all pointers are valid NUL-terminated strings; data may be NULL.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(kernel: &str, event: &str) -> EventFormat {
        let path = format!(
            "{}/tests/data/tracefs/{kernel}/{event}.format",
            env!("CARGO_MANIFEST_DIR")
        );
        parse_format(&fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn block_rq_complete_on_6_18_has_ioprio_and_a_10_byte_rwbs() {
        let f = fixture("6.18", "block_rq_complete");
        assert_eq!(f.name, "block_rq_complete");
        assert_eq!(f.id, 2107);
        let off = |n: &str| f.field(n).map(|f| (f.offset, f.size));
        assert_eq!(off("dev"), Some((8, 4)));
        assert_eq!(off("sector"), Some((16, 8)));
        assert_eq!(off("nr_sector"), Some((24, 4)));
        assert_eq!(off("error"), Some((28, 4)));
        assert_eq!(off("ioprio"), Some((32, 2)));
        assert_eq!(off("rwbs"), Some((34, 10)));
        assert_eq!(f.field("rwbs").unwrap().c_type, "char[10]");
        assert_eq!(f.field("cmd").unwrap().c_type, "__data_loc char[]");
        assert!(f.field("error").unwrap().signed);
        assert!(f.field("comm").is_none());
    }

    #[test]
    fn block_rq_issue_moved_between_6_5_and_6_18() {
        let old = fixture("6.5", "block_rq_issue");
        let new = fixture("6.18", "block_rq_issue");
        assert_eq!(old.field("rwbs").map(|f| (f.offset, f.size)), Some((32, 8)));
        assert_eq!(
            new.field("rwbs").map(|f| (f.offset, f.size)),
            Some((34, 10))
        );
        assert_eq!(old.field("comm").unwrap().offset, 40);
        assert_eq!(new.field("comm").unwrap().offset, 44);
        assert!(old.field("ioprio").is_none());
        assert_eq!(old.field("bytes").unwrap().offset, 28);
    }

    #[test]
    fn parses_every_captured_format_file() {
        for kernel in ["6.18", "6.5"] {
            let dir = format!("{}/tests/data/tracefs/{kernel}", env!("CARGO_MANIFEST_DIR"));
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "format") {
                    let text = fs::read_to_string(&path).unwrap();
                    let format = parse_format(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
                    assert_eq!(format.fields[0].name, "common_type", "{path:?}");
                    assert!(format.fields.len() > 4, "{path:?}");
                }
            }
        }
        let switch = fixture("6.18", "sched_switch");
        assert_eq!(
            switch
                .field("prev_state")
                .map(|f| (f.offset, f.size, f.signed)),
            Some((32, 8, true))
        );
        let dio = fixture("6.18", "iomap_dio_rw_begin");
        assert_eq!(
            dio.field("aio").map(|f| (f.offset, f.c_type.as_str())),
            Some((64, "bool"))
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert!(parse_format("").is_err());
        assert!(parse_format("name: x\nID: notanumber\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:int a;\toffset:x;\tsize:4;\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:;\toffset:1;\tsize:4;\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:int a;\tsize:4;\n").is_err());
        let ok = parse_format("name: x\nID: 1\n").unwrap();
        assert!(ok.fields.is_empty());
    }
}
