//! The tool's side: a pipeline tap that offers each closed interval to every attached viewer,
//! and the tasks that serve them, on the tool's own current-thread runtime.
//!
//! The tool never waits for a viewer: the tap encodes the snapshot once (only while someone
//! is attached) and puts it in each viewer's bounded queue without waiting ([`Fanout`]); a
//! viewer whose queue is full loses that frame, counted, and the count goes in the header of
//! every frame it does get, so it can say how many it lost. A viewer's task writes its queue
//! to its socket; one that cannot take a frame for [`STALL`] is hung up on (it reconnects).

use std::{
    io::ErrorKind,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _},
    sync::mpsc,
};

use super::{
    endpoint::{Bound, SocketFile, Token, token_matches},
    wire::{self, Hello, Refused, Welcome},
};
use crate::{model::Snapshot, pipeline::Pipeline};

/// Viewers attached at once; more are refused with a message.
pub const MAX_VIEWERS: usize = 16;
/// Connections open at once, handshakes included; more are closed at once.
const MAX_CONNECTIONS: usize = 2 * MAX_VIEWERS;
/// Frames waiting for one viewer: a viewer this far behind loses the next.
pub const QUEUE: usize = 4;
/// A viewer must say who it is within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A viewer that takes no frame for this long is hung up on.
pub const STALL: Duration = Duration::from_secs(30);

/// One encoded interval, shared by every queue it is in.
type Body = Arc<[u8]>;

/// The viewers' queues.
#[derive(Default)]
pub struct Fanout {
    viewers: Vec<Queue>,
}

/// One viewer's end of its queue.
struct Queue {
    frames: mpsc::Sender<Body>,
    dropped: Arc<AtomicU64>,
}

/// What a viewer's task holds: its frames, and the count of those it lost.
pub struct Subscription {
    pub frames: mpsc::Receiver<Body>,
    pub dropped: Arc<AtomicU64>,
}

impl Fanout {
    /// Viewers attached (those that left are forgotten first).
    pub fn attached(&mut self) -> usize {
        self.viewers.retain(|q| !q.frames.is_closed());
        self.viewers.len()
    }

    /// A new viewer's queue; `None` when [`MAX_VIEWERS`] are attached.
    pub fn join(&mut self) -> Option<Subscription> {
        if self.attached() >= MAX_VIEWERS {
            return None;
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        self.viewers.push(Queue {
            frames: tx,
            dropped: Arc::clone(&dropped),
        });
        Some(Subscription {
            frames: rx,
            dropped,
        })
    }

    /// Puts `body` in every viewer's queue without waiting; a full queue loses it (counted).
    /// Returns how many queues took it.
    pub fn offer(&mut self, body: &Body) -> usize {
        let mut taken = 0;
        self.viewers
            .retain(|q| match q.frames.try_send(Arc::clone(body)) {
                Ok(()) => {
                    taken += 1;
                    true
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    q.dropped.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
        taken
    }
}

/// What is published, kept alive as long as the tool runs (the socket file is removed when
/// this is dropped).
pub struct Published {
    pub socket: Option<SocketFile>,
    pub tcp: Option<(SocketAddr, Token)>,
    pub note: Option<String>,
}

impl Published {
    /// Where viewers attach, in words (for stderr).
    pub fn describe(&self) -> Vec<String> {
        let socket = self.socket.as_ref().map(|file| {
            format!(
                "viewers attach with: iotop-bpf attach {}",
                file.path().display()
            )
        });
        socket.into_iter().chain(self.tcp_line()).collect()
    }

    /// How TCP viewers attach, with the token when the tool made it (for the key line).
    pub fn tcp_line(&self) -> Option<String> {
        let (addr, token) = self.tcp.as_ref()?;
        Some(if token.generated {
            format!(
                "TCP viewers attach with: IOTOP_BPF_VIEWERS_TOKEN={} iotop-bpf attach {addr}",
                token.value
            )
        } else {
            format!("TCP viewers attach with: iotop-bpf attach {addr} and the token")
        })
    }
}

/// Serves viewers on what was bound, from now on, with every interval `pipeline` closes.
/// `front_end` says what the tool runs (`the live view`, `serve`). Must run inside the
/// runtime.
pub fn publish(pipeline: &mut Pipeline, bound: Bound, front_end: &str) -> Result<Published> {
    let hub = Hub::new(Welcome {
        version: wire::VERSION,
        tool: wire::who(),
        pid: std::process::id(),
        front_end: front_end.to_string(),
        run: pipeline.info().clone(),
        notes: pipeline.notes(),
    });
    let mut published = Published {
        socket: None,
        tcp: None,
        note: bound.note,
    };
    if let Some((listener, file)) = bound.unix {
        hub.serve_unix(
            tokio::net::UnixListener::from_std(listener)
                .context("register the viewers' socket with the runtime")?,
        );
        published.socket = Some(file);
    }
    if let Some((listener, token)) = bound.tcp {
        let addr = listener.local_addr().context("the viewers' TCP address")?;
        hub.serve_tcp(
            tokio::net::TcpListener::from_std(listener)
                .context("register the viewers' TCP socket with the runtime")?,
            &token.value,
        );
        published.tcp = Some((addr, token));
    }
    if published.socket.is_some() || published.tcp.is_some() {
        pipeline.tap(move |snap| hub.offer(snap));
    }
    Ok(published)
}

/// The viewers of one tool: their queues, what they are told first, and the connections'
/// count.
#[derive(Clone)]
pub struct Hub {
    fanout: Arc<Mutex<Fanout>>,
    welcome: Arc<Welcome>,
    open: Arc<AtomicUsize>,
}

impl Hub {
    pub fn new(welcome: Welcome) -> Self {
        Self {
            fanout: Arc::new(Mutex::new(Fanout::default())),
            welcome: Arc::new(welcome),
            open: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Serves the viewers that connect to `listener`, in a task of the current runtime.
    pub fn serve_unix(&self, listener: tokio::net::UnixListener) {
        let server = self.server(None);
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        limit_send_buffer(&stream);
                        server.admit(stream);
                    }
                    // Out of file descriptors and the like: wait instead of spinning.
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
    }

    /// Serves the viewers that connect to `listener` and give `token`.
    pub fn serve_tcp(&self, listener: tokio::net::TcpListener, token: &str) {
        let server = self.server(Some(Arc::from(token)));
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        server.admit(stream);
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
    }

    fn server(&self, token: Option<Arc<str>>) -> Server {
        Server {
            fanout: Arc::clone(&self.fanout),
            welcome: Arc::clone(&self.welcome),
            token,
            open: Arc::clone(&self.open),
        }
    }

    /// The tap: encodes the interval once, if anyone is attached, and offers it to all
    /// without waiting.
    pub fn offer(&self, snap: &Snapshot) {
        let mut fanout = self.fanout.lock().unwrap_or_else(PoisonError::into_inner);
        if fanout.attached() == 0 {
            return;
        }
        // A snapshot that cannot be encoded (it cannot happen with these plain types) is
        // one frame every viewer misses; the sequence numbers show the gap.
        if let Ok(body) = wire::encode_interval(snap) {
            fanout.offer(&Body::from(body));
        }
    }

    /// Viewers attached now.
    #[cfg(test)]
    pub fn viewers(&self) -> usize {
        self.fanout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .attached()
    }
}

/// The kernel's buffer for a local viewer: small, so that a viewer that stalls (stopped,
/// its terminal frozen) is a few frames behind, not hundreds (the kernel's default holds a
/// minute of small ones), and, awake again, shows the present after the frames it lost,
/// counted. (Not for TCP, where a small buffer would cap what a distant viewer receives.)
const LOCAL_SEND_BUFFER: libc::c_int = 32 << 10;

fn limit_send_buffer(stream: &impl std::os::fd::AsRawFd) {
    // SAFETY: a valid socket and an int option of the right size. Best effort: the
    // default only means a longer backlog.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            std::ptr::from_ref(&LOCAL_SEND_BUFFER).cast(),
            libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4),
        );
    }
}

/// What every connection's task needs.
#[derive(Clone)]
struct Server {
    fanout: Arc<Mutex<Fanout>>,
    welcome: Arc<Welcome>,
    /// Required of TCP viewers.
    token: Option<Arc<str>>,
    open: Arc<AtomicUsize>,
}

/// Gives back a connection's place when its task ends.
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Server {
    fn admit<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if self.open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let place = Place(Arc::clone(&self.open));
        let server = self.clone();
        tokio::spawn(async move {
            let _place = place;
            // Errors are the viewer's (it left, it is not a viewer): nothing to report, the
            // tool may be drawing a terminal UI.
            let _ = server.serve(stream).await;
        });
    }

    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(&self, mut stream: S) -> Result<()> {
        let hello = match tokio::time::timeout(HANDSHAKE_TIMEOUT, hello(&mut stream)).await {
            Ok(Ok(Some(hello))) => hello,
            // Not a viewer (a port scan, `attach` looking for live sockets): hang up.
            Ok(Ok(None) | Err(_)) | Err(_) => return Ok(()),
        };
        let subscription = match self.judge(&hello) {
            Ok(subscription) => subscription,
            Err(reason) => {
                let refused = Refused {
                    version: wire::VERSION,
                    reason,
                };
                stream
                    .write_all(&wire::handshake(wire::REFUSED, &refused))
                    .await?;
                return Ok(stream.shutdown().await?);
            }
        };
        stream
            .write_all(&wire::handshake(wire::WELCOME, &*self.welcome))
            .await?;
        let Subscription {
            mut frames,
            dropped,
        } = subscription;
        // The viewer says nothing more: a read that ends is a viewer that left, and its
        // place is given back at once rather than at the next interval's write.
        let (mut reader, mut writer) = tokio::io::split(stream);
        let mut ignored = [0u8; 64];
        loop {
            let body = tokio::select! {
                frame = frames.recv() => match frame {
                    Some(body) => body,
                    None => return Ok(()),
                },
                read = reader.read(&mut ignored) => match read {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(_) => continue,
                },
            };
            let header = wire::interval_header(body.len(), dropped.load(Ordering::Relaxed));
            let write = async {
                writer.write_all(&header).await?;
                writer.write_all(&body).await
            };
            match tokio::time::timeout(STALL, write).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => return Err(std::io::Error::from(ErrorKind::TimedOut).into()),
            }
        }
    }

    /// Whether this viewer may attach (its queue), or why not.
    fn judge(&self, hello: &Hello) -> Result<Subscription, String> {
        let welcome = &self.welcome;
        if hello.version != wire::VERSION {
            return Err(format!(
                "{} (pid {}) publishes viewer format {}, {} speaks format {}: attach with the \
                 same version of iotop-bpf",
                welcome.tool,
                welcome.pid,
                wire::VERSION,
                hello.client,
                hello.version
            ));
        }
        if let Some(token) = &self.token
            && !hello
                .token
                .as_deref()
                .is_some_and(|given| token_matches(given, token))
        {
            return Err(match hello.token {
                Some(_) => "wrong token".to_string(),
                None => {
                    "a token is needed over TCP (--token or IOTOP_BPF_VIEWERS_TOKEN)".to_string()
                }
            });
        }
        self.fanout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join()
            .ok_or_else(|| format!("{MAX_VIEWERS} viewers are attached already, the most"))
    }
}

/// Reads a viewer's preamble and hello; `None` for a client that is not a viewer.
async fn hello(stream: &mut (impl AsyncRead + Unpin)) -> Result<Option<Hello>> {
    let mut preamble = [0u8; wire::PREAMBLE.len()];
    if stream.read_exact(&mut preamble).await.is_err() || &preamble != wire::PREAMBLE {
        return Ok(None);
    }
    match wire::read_frame(stream, wire::MAX_HANDSHAKE).await? {
        Some((wire::HELLO, payload)) => Ok(wire::parse(&payload, "hello").ok()),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: u8) -> Body {
        Body::from(vec![n; 3])
    }

    #[test]
    fn a_full_queue_loses_frames_counted_and_never_waits() {
        let mut fanout = Fanout::default();
        let mut fast = fanout.join().unwrap();
        let slow = fanout.join().unwrap();
        assert_eq!(fanout.attached(), 2);
        for n in 0..10u8 {
            let taken = fanout.offer(&body(n));
            // The fast viewer reads every frame at once; the slow one reads none.
            assert_eq!(fast.frames.try_recv().unwrap()[0], n);
            assert_eq!(
                taken,
                if usize::from(n) < QUEUE { 2 } else { 1 },
                "frame {n}"
            );
        }
        assert_eq!(fast.dropped.load(Ordering::Relaxed), 0);
        assert_eq!(
            slow.dropped.load(Ordering::Relaxed),
            10 - QUEUE as u64,
            "every frame past its queue is counted"
        );
        // The slow viewer gets the oldest frames it had room for, then the newest again
        // once it reads.
        let mut slow = slow;
        let kept: Vec<u8> = (0..QUEUE)
            .map(|_| slow.frames.try_recv().unwrap()[0])
            .collect();
        assert_eq!(kept, [0, 1, 2, 3]);
        fanout.offer(&body(10));
        assert_eq!(slow.frames.try_recv().unwrap()[0], 10);
        // A viewer that left is forgotten; the others go on.
        drop(slow);
        assert_eq!(fanout.offer(&body(11)), 1);
        assert_eq!(fanout.attached(), 1);
    }

    #[test]
    fn viewers_are_bounded() {
        let mut fanout = Fanout::default();
        let held: Vec<Subscription> = (0..MAX_VIEWERS).map(|_| fanout.join().unwrap()).collect();
        assert!(fanout.join().is_none(), "one more than the most");
        drop(held);
        assert!(
            fanout.join().is_some(),
            "places come back when viewers leave"
        );
    }
}
