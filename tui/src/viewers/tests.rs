//! The tool's side and the viewer's side over real sockets, in one process: what a viewer
//! receives, what is refused, and what a slow or departing viewer costs (nothing).

use std::{path::PathBuf, time::Duration};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{
    client::{self, Target},
    endpoint,
    publish::{Hub, MAX_VIEWERS, QUEUE},
    wire::{self, Hello, Welcome},
};
use crate::{history::fixtures::snapshot_at, pipeline::RunInfo};

fn welcome() -> Welcome {
    Welcome {
        version: wire::VERSION,
        tool: wire::who(),
        pid: 4242,
        front_end: "the live view".into(),
        run: RunInfo {
            host: "db01".into(),
            kernel: "6.12.0".into(),
            started_ns: 1,
            started_unix_ms: 2,
            interval_ns: 1_000_000_000,
        },
        notes: vec!["the D-state pane is off".into()],
    }
}

/// A scratch socket path, and a runtime to serve it.
fn socket(tag: &str) -> (PathBuf, tokio::runtime::Runtime) {
    let dir = std::env::temp_dir().join(format!("iotop-bpf-hub-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (dir.join("t.sock"), runtime)
}

/// Serves a hub on a Unix socket at `path`.
fn serve(path: &std::path::Path) -> (Hub, endpoint::SocketFile) {
    let (listener, file) = endpoint::bind_unix(path, None).unwrap();
    let hub = Hub::new(welcome());
    hub.serve_unix(tokio::net::UnixListener::from_std(listener).unwrap());
    (hub, file)
}

/// Lets the connections' tasks run (they share the test's thread) until `done`.
async fn settle(mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("never settled");
}

#[test]
fn every_viewer_gets_the_same_intervals() {
    let (path, runtime) = socket("same");
    runtime.block_on(async {
        let (hub, _file) = serve(&path);
        let target = Target::Unix(path.clone());
        let mut a = client::connect(&target, None).await.unwrap();
        let mut b = client::connect(&target, None).await.unwrap();
        assert_eq!(a.welcome, welcome());
        settle(|| hub.viewers() == 2).await;
        for seq in 1..=5 {
            hub.offer(&snapshot_at(seq));
            let (lost_a, from_a) = a.next().await.unwrap();
            let (lost_b, from_b) = b.next().await.unwrap();
            assert_eq!((lost_a, lost_b), (0, 0));
            assert_eq!(from_a.snapshot, snapshot_at(seq));
            assert_eq!(from_b.snapshot, from_a.snapshot);
        }
    });
}

#[test]
fn a_slow_viewer_loses_frames_counted_and_the_others_do_not_wait() {
    let (path, runtime) = socket("slow");
    runtime.block_on(async {
        let (hub, _file) = serve(&path);
        let target = Target::Unix(path.clone());
        let mut slow = client::connect(&target, None).await.unwrap();
        settle(|| hub.viewers() == 1).await;
        // Ten intervals close while the viewer's task gets no turn (the tool's thread is
        // busy): its queue takes QUEUE of them, the rest are dropped at once.
        for seq in 1..=10 {
            hub.offer(&snapshot_at(seq));
        }
        let mut seqs = Vec::new();
        let mut last_lost = 0;
        for _ in 0..QUEUE {
            let (lost, interval) = slow.next().await.unwrap();
            seqs.push(interval.snapshot.seq);
            last_lost = lost;
        }
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert_eq!(
            last_lost,
            10 - QUEUE as u64,
            "every dropped frame is counted"
        );
        hub.offer(&snapshot_at(11));
        let (lost, interval) = slow.next().await.unwrap();
        assert_eq!(interval.snapshot.seq, 11);
        assert_eq!(
            interval.snapshot.seq - 1 - seqs[QUEUE - 1],
            lost,
            "the gap in the sequence is the count the viewer is told"
        );
    });
}

#[test]
fn a_viewer_that_leaves_or_is_no_viewer_harms_nothing() {
    let (path, runtime) = socket("leave");
    runtime.block_on(async {
        let (hub, _file) = serve(&path);
        let target = Target::Unix(path.clone());
        let mut stays = client::connect(&target, None).await.unwrap();
        let leaves = client::connect(&target, None).await.unwrap();
        // Not a viewer: garbage, then a hang-up; and one that never says anything.
        let mut garbage = tokio::net::UnixStream::connect(&path).await.unwrap();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        // Hung up on with bytes unread: a reset, or the end.
        let _ = garbage.read_to_end(&mut answer).await;
        assert!(answer.is_empty(), "a stranger is hung up on, told nothing");
        let _silent = tokio::net::UnixStream::connect(&path).await.unwrap();
        settle(|| hub.viewers() == 2).await;
        drop(leaves);
        for seq in 1..=3 {
            hub.offer(&snapshot_at(seq));
            assert_eq!(stays.next().await.unwrap().1.snapshot.seq, seq);
        }
        assert_eq!(hub.viewers(), 1, "the one that left is forgotten");
        // It comes back: served again from the next interval on.
        let mut back = client::connect(&target, None).await.unwrap();
        settle(|| hub.viewers() == 2).await;
        hub.offer(&snapshot_at(4));
        assert_eq!(back.next().await.unwrap().1.snapshot.seq, 4);
        assert_eq!(stays.next().await.unwrap().1.snapshot.seq, 4);
    });
}

#[test]
fn a_tool_that_quits_is_said_to_have_closed_and_its_socket_goes() {
    let (path, runtime) = socket("quit");
    // The tool, on a thread and runtime of its own, until told to quit.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (hub_tx, hub_rx) = std::sync::mpsc::channel();
    let tool_path = path.clone();
    let tool = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (hub, _file) = serve(&tool_path);
            hub_tx.send(hub.clone()).unwrap();
            let _ = stopped.await;
        });
        // The runtime goes: its tasks, and their connections, with it.
    });
    let hub = hub_rx.recv().unwrap();
    runtime.block_on(async {
        let target = Target::Unix(path.clone());
        let mut viewer = client::connect(&target, None).await.unwrap();
        settle(|| hub.viewers() == 1).await;
        hub.offer(&snapshot_at(1));
        assert_eq!(viewer.next().await.unwrap().1.snapshot.seq, 1);
        stop.send(()).unwrap();
        tool.join().unwrap();
        let err = viewer.next().await.err().unwrap().to_string();
        assert!(err.contains("the tool closed the connection"), "{err}");
        assert!(!path.exists(), "the socket is removed when the tool exits");
        let err = client::connect(&target, None)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no iotop-bpf publishes there"), "{err}");
    });
}

#[test]
fn tcp_needs_the_token() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hub = Hub::new(welcome());
        hub.serve_tcp(listener, "0123456789abcdef");
        let target = Target::Tcp(addr.to_string());
        let err = client::connect(&target, Some("wrong-token"))
            .await
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            format!("{addr} refused this viewer: wrong token")
        );
        let err = client::connect(&target, None)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("a token is needed over TCP"), "{err}");
        let mut viewer = client::connect(&target, Some("0123456789abcdef"))
            .await
            .unwrap();
        settle(|| hub.viewers() == 1).await;
        hub.offer(&snapshot_at(7));
        assert_eq!(viewer.next().await.unwrap().1.snapshot, snapshot_at(7));
    });
}

#[test]
fn another_version_and_one_viewer_too_many_are_refused_in_words() {
    let (path, runtime) = socket("refuse");
    runtime.block_on(async {
        let (hub, _file) = serve(&path);
        // A viewer of another format: told so, in JSON it can read.
        let mut stream = tokio::net::UnixStream::connect(&path).await.unwrap();
        let hello = Hello {
            version: wire::VERSION + 1,
            token: None,
            client: "iotop-bpf 9.0.0".into(),
        };
        stream.write_all(wire::PREAMBLE).await.unwrap();
        stream
            .write_all(&wire::handshake(wire::HELLO, &hello))
            .await
            .unwrap();
        let (kind, payload) = wire::read_frame(&mut stream, wire::MAX_HANDSHAKE)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kind, wire::REFUSED);
        let refused: wire::Refused = wire::parse(&payload, "refusal").unwrap();
        assert!(
            refused.reason.contains("iotop-bpf 9.0.0 speaks format 2")
                && refused.reason.contains("same version"),
            "{}",
            refused.reason
        );
        let target = Target::Unix(path.clone());
        let mut held = Vec::new();
        for _ in 0..MAX_VIEWERS {
            held.push(client::connect(&target, None).await.unwrap());
        }
        let err = client::connect(&target, None)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("16 viewers are attached already"), "{err}");
        held.pop();
        settle(|| hub.viewers() < MAX_VIEWERS).await;
        client::connect(&target, None).await.unwrap();
    });
}
