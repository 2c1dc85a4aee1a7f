//! Where viewers attach: a Unix socket (by default `/run/iotop-bpf/PID.sock`), whose file
//! permissions decide who may (mode 0660: the tool's user, and the group named with
//! `--viewers-group`), and, only when asked for, a TCP address, where a token does.
//!
//! The socket is bound before the probes are loaded, so a path in use fails at once with a
//! one-line message; a socket left by a tool that is gone is removed; the tool removes its
//! own when it exits ([`SocketFile`]).

use std::{
    io::ErrorKind,
    net::{SocketAddr, TcpListener},
    os::unix::{
        fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, PermissionsExt as _},
        net::{UnixListener, UnixStream},
    },
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, anyhow, bail};

/// The directory of the default sockets when the tool runs as root.
pub const RUN_DIR: &str = "/run/iotop-bpf";
/// Under `$XDG_RUNTIME_DIR` (or systemd's `$RUNTIME_DIRECTORY` itself) otherwise.
const SUBDIR: &str = "iotop-bpf";

/// Mode of the socket: read and write (which connecting needs) for its user and group.
pub const SOCKET_MODE: u32 = 0o660;

/// What the tool listens on for viewers, bound, before the runtime starts.
pub struct Bound {
    pub unix: Option<(UnixListener, SocketFile)>,
    pub tcp: Option<(TcpListener, Token)>,
    /// Why the default socket is not published (the tool runs on without it).
    pub note: Option<String>,
}

/// The TCP token, and whether the tool made it (then it prints it).
#[derive(Clone, Debug)]
pub struct Token {
    pub value: String,
    pub generated: bool,
}

/// The socket file the tool made: removed when the tool exits, unless something else has
/// taken its path since.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && meta.dev() == self.dev
            && meta.ino() == self.ino
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Where to publish for viewers (`--viewers-*`; `cli::Viewers::endpoint` makes it, so the
/// viewers do not depend on the command line).
#[derive(Debug)]
pub struct Options {
    /// The Unix socket (None: the default one).
    pub socket: Option<PathBuf>,
    /// The group given the socket (a name or a gid).
    pub group: Option<String>,
    /// Also a TCP address, where viewers give the token.
    pub listen: Option<SocketAddr>,
    /// The TCP viewers' token (None: a random one).
    pub token: Option<String>,
    /// Publish nothing.
    pub off: bool,
}

/// Binds what `opts` asks for. An explicit socket or address that cannot be bound is an
/// error; the default socket only leaves a note.
pub fn bind(opts: &Options) -> Result<Bound> {
    let mut bound = Bound {
        unix: None,
        tcp: None,
        note: None,
    };
    if opts.off {
        return Ok(bound);
    }
    let group = opts.group.as_deref().map(group_id).transpose()?;
    match &opts.socket {
        Some(path) => bound.unix = Some(bind_unix(path, group)?),
        None => match default_socket() {
            Ok(path) => {
                if let Some(dir) = path.parent() {
                    remove_stale(dir);
                }
                match bind_unix(&path, group) {
                    Ok(unix) => bound.unix = Some(unix),
                    // A group the tool cannot give the socket to was asked for explicitly.
                    Err(e) if group.is_some() => return Err(e),
                    Err(e) => bound.note = Some(format!("not published for viewers: {e:#}")),
                }
            }
            Err(why) => bound.note = Some(format!("not published for viewers: {why}")),
        },
    }
    if let Some(addr) = opts.listen {
        let listener = bind_tcp(addr)?;
        let token = match &opts.token {
            Some(value) if value.trim().len() < 8 => {
                bail!("--viewers-token: a token needs at least 8 characters")
            }
            Some(value) => Token {
                value: value.trim().to_string(),
                generated: false,
            },
            None => Token {
                value: random_token()?,
                generated: true,
            },
        };
        bound.tcp = Some((listener, token));
    }
    Ok(bound)
}

/// `$RUNTIME_DIRECTORY` (systemd's `RuntimeDirectory=`), `/run/iotop-bpf` for root,
/// `$XDG_RUNTIME_DIR/iotop-bpf` for anyone else; `PID.sock` in it, the directory made.
fn default_socket() -> Result<PathBuf, String> {
    let name = format!("{}.sock", std::process::id());
    if let Some(dir) = std::env::var_os("RUNTIME_DIRECTORY").filter(|d| !d.is_empty()) {
        // It may list several; the first is ours.
        let first = dir
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or("")
            .to_string();
        return Ok(Path::new(&first).join(name));
    }
    // SAFETY: geteuid has no preconditions.
    let (dir, mode) = if unsafe { libc::geteuid() } == 0 {
        (PathBuf::from(RUN_DIR), 0o755)
    } else {
        match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            Some(dir) => (Path::new(&dir).join(SUBDIR), 0o700),
            None => {
                return Err(format!(
                    "not root (for {RUN_DIR}) and no $XDG_RUNTIME_DIR; name a socket with \
                     --viewers-socket"
                ));
            }
        }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(&dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    // The umask may have taken bits the group's viewers need to reach the socket (a root
    // umask of 077 makes it 0700): the directory's mode is the socket's business.
    if mode == 0o755 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot open {} to viewers: {e}", dir.display()))?;
    }
    Ok(dir.join(name))
}

/// The directories `attach` looks in for a running tool's socket.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(RUN_DIR)];
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let dir = Path::new(&dir).join(SUBDIR);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// The sockets in `dir` (by name: `*.sock`).
pub fn sockets_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    found.sort();
    found
}

/// Whether a socket file's tool is still there.
#[derive(Debug, PartialEq, Eq)]
pub enum Liveness {
    Live,
    /// Nothing listens: its tool is gone.
    Stale,
    /// It may not be connected to by this user.
    Denied,
    /// Something else went wrong (said).
    Other(String),
}

/// Connects (and hangs up at once) to see whether a tool listens on `path`.
pub fn liveness(path: &Path) -> Liveness {
    match UnixStream::connect(path) {
        Ok(_) => Liveness::Live,
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::NotFound) => {
            Liveness::Stale
        }
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Liveness::Denied,
        Err(e) => Liveness::Other(e.to_string()),
    }
}

/// Removes the sockets of tools that are gone from a default directory (killed tools leave
/// them; nothing else puts sockets there).
fn remove_stale(dir: &Path) {
    for path in sockets_in(dir) {
        if liveness(&path) == Liveness::Stale {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Binds the Unix socket at `path`: refused when a live tool publishes there or the path is
/// something else; a stale socket is replaced. Mode 0660, and the group `group` when given.
pub fn bind_unix(path: &Path, group: Option<u32>) -> Result<(UnixListener, SocketFile)> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match liveness(path) {
            Liveness::Live => bail!(
                "cannot publish for viewers on {shown}: a running iotop-bpf publishes there \
                 (pick another path with --viewers-socket, or --no-viewers)"
            ),
            Liveness::Stale => std::fs::remove_file(path)
                .with_context(|| format!("remove {shown}, left by an iotop-bpf that is gone"))?,
            Liveness::Denied | Liveness::Other(_) => bail!(
                "cannot publish for viewers on {shown}: a socket is there that this user \
                 cannot check"
            ),
        },
        Ok(_) => bail!("cannot publish for viewers on {shown}: it exists and is not a socket"),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => bail!("cannot publish for viewers on {shown}: {e}"),
    }
    // The socket is made owner-only and opened to the group after: never, even for an
    // instant, more open than asked. (The umask is the process's: this runs at start-up,
    // before the probes' threads.)
    // SAFETY: umask has no preconditions.
    let old = unsafe { libc::umask(0o177) };
    let listener = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = listener.map_err(|e| {
        let why = match e.kind() {
            ErrorKind::PermissionDenied => {
                "permission denied (pick a path you may write with --viewers-socket)".to_string()
            }
            ErrorKind::NotFound => "its directory does not exist".to_string(),
            _ => e.to_string(),
        };
        anyhow!("cannot publish for viewers on {shown}: {why}")
    })?;
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("stat {shown}"))?;
    let file = SocketFile {
        path: path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
            anyhow!(
                "cannot give the viewers' socket {shown} to group {gid}: {e} (only root, or a \
                 member of the group, may)"
            )
        })?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .with_context(|| format!("set the mode of {shown}"))?;
    listener
        .set_nonblocking(true)
        .context("make the viewers' socket non-blocking")?;
    Ok((listener, file))
}

fn bind_tcp(addr: SocketAddr) -> Result<TcpListener> {
    let listener = TcpListener::bind(addr).map_err(|e| {
        let why = match e.kind() {
            ErrorKind::AddrInUse => {
                "the address is in use; pick another with --viewers-listen".to_string()
            }
            ErrorKind::AddrNotAvailable => "it is not an address of this machine".to_string(),
            ErrorKind::PermissionDenied => {
                "ports below 1024 need root or CAP_NET_BIND_SERVICE".to_string()
            }
            _ => e.to_string(),
        };
        anyhow!("cannot listen for viewers on {addr}: {why}")
    })?;
    listener
        .set_nonblocking(true)
        .context("make the viewers' TCP socket non-blocking")?;
    Ok(listener)
}

/// A group by name, or a numeric gid.
pub fn group_id(name: &str) -> Result<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| anyhow!("--viewers-group: {name:?} is not a group name"))?;
    // SAFETY: a NUL-terminated name; the result is read at once, before any other call
    // that could reuse its static buffer.
    let entry = unsafe { libc::getgrnam(c_name.as_ptr()) };
    if entry.is_null() {
        bail!("--viewers-group: there is no group {name:?} (see /etc/group)");
    }
    // SAFETY: non-null, as getgrnam returned it.
    Ok(unsafe { (*entry).gr_gid })
}

/// A group's name, for messages (its number when unnamed).
pub fn group_name(gid: u32) -> String {
    // SAFETY: the result is read at once.
    let entry = unsafe { libc::getgrgid(gid) };
    if entry.is_null() {
        return gid.to_string();
    }
    // SAFETY: getgrgid's entry has a NUL-terminated name.
    unsafe { std::ffi::CStr::from_ptr((*entry).gr_name) }
        .to_string_lossy()
        .into_owned()
}

/// 128 random bits, in hex.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    // SAFETY: the buffer is 16 writable bytes.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(n).ok() != Some(bytes.len()) {
        bail!(
            "cannot make a token for TCP viewers: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares a token in time that does not depend on where it differs.
pub fn token_matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.trim().as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("iotop-bpf-viewers-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_socket_is_0660_refused_while_live_replaced_when_stale_and_removed() {
        let dir = scratch("bind");
        let path = dir.join("t.sock");
        let (listener, file) = bind_unix(&path, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, SOCKET_MODE);
        assert_eq!(liveness(&path), Liveness::Live);
        let err = bind_unix(&path, None).unwrap_err().to_string();
        assert!(err.contains("a running iotop-bpf publishes there"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
        // The tool is killed: its socket stays, nobody listens.
        drop(listener);
        std::mem::forget(file);
        assert_eq!(liveness(&path), Liveness::Stale);
        let (_listener, file) = bind_unix(&path, None).expect("a stale socket is replaced");
        assert_eq!(liveness(&path), Liveness::Live);
        drop(file);
        assert!(!path.exists(), "removed on exit");
        // Not a socket: left alone.
        std::fs::write(&path, "data").unwrap();
        let err = bind_unix(&path, None).unwrap_err().to_string();
        assert!(err.contains("not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_group_is_given_the_socket() {
        // SAFETY: getegid has no preconditions.
        let own = unsafe { libc::getegid() };
        let dir = scratch("group");
        let path = dir.join("g.sock");
        let (_listener, _file) = bind_unix(&path, Some(own)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().gid(), own);
        assert_eq!(group_id(&own.to_string()).unwrap(), own);
        assert_eq!(group_id(&group_name(0)).unwrap(), 0);
        let err = group_id("no-such-group-here").unwrap_err().to_string();
        assert!(err.contains("no group"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tokens() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(token_matches(&a, &a));
        assert!(
            token_matches(&format!(" {a}\n"), &a),
            "spaces around are not the token"
        );
        assert!(!token_matches(&b, &a));
        assert!(!token_matches(&a[..31], &a));
        assert!(!token_matches("", &a));
    }
}
