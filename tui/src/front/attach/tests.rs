//! The viewer's feed: frames lost across reconnections, a new run's fresh start, and what the
//! screen says of the link.

use ratatui::{Terminal, backend::TestBackend};

use super::*;
use crate::{front::app::Flow, history::fixtures::snapshot_at, viewers::wire};

fn welcome(pid: u32, started_ns: u64) -> Welcome {
    Welcome {
        version: wire::VERSION,
        tool: wire::who(),
        pid,
        front_end: "serve".into(),
        run: RunInfo {
            host: format!("host-{pid}"),
            kernel: "6.12.0".into(),
            started_ns,
            started_unix_ms: 1_700_000_000_000,
            interval_ns: 1_000_000_000,
        },
        notes: Vec::new(),
    }
}

fn interval(seq: u64, dropped: u64) -> Event {
    Event::Interval {
        dropped,
        snapshot: Box::new(snapshot_at(seq)),
    }
}

/// Feeds `events` through a [`LinkFeed`] into an [`App`], as the loop does.
fn feed(app: &mut App, link: &mut LinkFeed, events: Vec<Event>) {
    for event in events {
        let fed = link.take(event);
        assert_eq!(app.apply(fed), Flow::Continue);
        if let Some(fed) = link.pending.take() {
            app.apply(fed);
        }
    }
}

fn attached(first: &Welcome) -> (App, LinkFeed) {
    let (_tx, rx) = mpsc::channel(1);
    let app = App::new(UiState {
        link: Some(Link::Attached { lost: 0 }),
        ..UiState::default()
    });
    (app, LinkFeed::new(first, rx))
}

fn screen(app: &mut App) -> String {
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    app.draw(&mut terminal).unwrap();
    crate::front::capture::screen_text(terminal.backend().buffer())
}

#[test]
fn frames_lost_are_counted_across_reconnections_to_the_same_run() {
    let first = welcome(100, 5);
    let (mut app, mut link) = attached(&first);
    feed(&mut app, &mut link, vec![interval(1, 0), interval(2, 0)]);
    assert_eq!(app.shown.seq, 2);
    assert_eq!(app.ui.link, Some(Link::Attached { lost: 0 }));
    // The tool dropped 3 frames for this viewer (it told us in the next frame's header).
    feed(&mut app, &mut link, vec![interval(6, 3)]);
    assert_eq!(app.shown.seq, 6, "the interval is shown, after the count");
    assert_eq!(app.ui.link, Some(Link::Attached { lost: 3 }));
    assert!(screen(&mut app).contains("[attached, 3 lost]"));
    // The connection is lost: the screen keeps the last interval and says so (where it
    // attached, said at start, gives way).
    app.ui.message = Some("attached to iotop-bpf (pid 100, serve) at x.sock".into());
    feed(
        &mut app,
        &mut link,
        vec![Event::Lost("the tool closed the connection".into())],
    );
    assert_eq!(app.shown.seq, 6);
    let text = screen(&mut app);
    assert!(text.contains("[DISCONNECTED]"), "{text}");
    assert!(
        text.contains("disconnected: the tool closed the connection; trying again"),
        "{text}"
    );
    // Back to the same run: its history goes on, the new connection counts from 0.
    feed(
        &mut app,
        &mut link,
        vec![
            Event::Back(Box::new(first.clone())),
            interval(9, 0),
            interval(10, 1),
        ],
    );
    assert_eq!(app.ui.link, Some(Link::Attached { lost: 4 }));
    assert_eq!(app.shown.seq, 10);
    assert!(
        app.history.snapshot(6).is_some(),
        "the intervals before the reconnection are still there to step back to"
    );
}

#[test]
fn a_new_run_starts_a_fresh_history() {
    let first = welcome(100, 5);
    let (mut app, mut link) = attached(&first);
    feed(&mut app, &mut link, vec![interval(40, 2), interval(41, 2)]);
    app.on_key(crossterm::event::KeyEvent::from(
        crossterm::event::KeyCode::Char('p'),
    ));
    assert!(app.ui.paused);
    feed(&mut app, &mut link, vec![Event::Lost("gone".into())]);
    // The tool was restarted: another pid, another start.
    let second = welcome(200, 9);
    feed(
        &mut app,
        &mut link,
        vec![Event::Back(Box::new(second)), interval(1, 0)],
    );
    assert_eq!(app.ui.host, "host-200");
    assert_eq!(app.ui.link, Some(Link::Attached { lost: 0 }));
    assert!(!app.ui.paused, "nothing of the old run to stay paused on");
    assert_eq!(app.shown.seq, 1);
    assert!(
        app.history.snapshot(40).is_none(),
        "the old run's intervals are not this one's past"
    );
}

#[test]
fn the_feed_gives_the_pending_interval_before_reading_on() {
    let first = welcome(100, 5);
    let (tx, rx) = mpsc::channel(4);
    let mut link = LinkFeed::new(&first, rx);
    crate::viewers::wire::tests::block(async {
        tx.send(interval(3, 2)).await.unwrap();
        assert!(matches!(
            link.next().await.unwrap(),
            Step::Aside(Fed::Link(Link::Attached { lost: 2 }))
        ));
        assert!(matches!(link.next().await.unwrap(), Step::Interval(s) if s.seq == 3));
        drop(tx);
        assert!(matches!(link.next().await.unwrap(), Step::End));
    });
}
