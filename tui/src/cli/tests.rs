//! The command line: consistent, and each option checked.

use clap::CommandFactory;

use super::*;

#[test]
fn cli_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn delays_are_validated() {
    assert_eq!(parse_delay("0.5"), Ok(Duration::from_millis(500)));
    assert!(parse_delay("0").is_err());
    assert!(parse_delay("abc").is_err());
    let cli =
        Cli::try_parse_from(["iotop-bpf", "--json", "-d", "2", "-n", "3", "-p", "1,2"]).unwrap();
    assert!(cli.is_batch());
    assert_eq!(
        (cli.delay, cli.iterations, cli.pids),
        (Duration::from_secs(2), Some(3), vec![1, 2])
    );
}

#[test]
fn record_options() {
    assert_eq!(parse_size("512M"), Ok(512 << 20));
    assert_eq!(parse_size("2GiB"), Ok(2 << 30));
    assert_eq!(parse_size("1048576"), Ok(1 << 20));
    assert!(parse_size("12").unwrap_err().contains("too small"));
    assert!(parse_size("1.5G").is_err());
    assert!(parse_size("99999999999T").is_err());
    let cli = Cli::try_parse_from([
        "iotop-bpf",
        "serve",
        "--record",
        "/var/log/x.rec",
        "--record-max",
        "1G",
    ])
    .unwrap();
    let Some(Command::Serve(serve)) = cli.command else {
        panic!("not serve")
    };
    assert_eq!(serve.record.record_max, Some(1 << 30));
    let cli = Cli::try_parse_from(["iotop-bpf", "--json", "--replay", "a.0001", "a.0002"]).unwrap();
    assert_eq!(cli.replay.len(), 2);
    for bad in [
        &["iotop-bpf", "--record-max", "1G"][..],
        &["iotop-bpf", "--record", "x", "--replay", "y"],
        &["iotop-bpf", "report", "-o", "x.html"],
    ] {
        assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn viewers_options() {
    let cli = Cli::try_parse_from([
        "iotop-bpf",
        "--viewers-group",
        "adm",
        "--viewers-listen",
        ":10136",
    ])
    .unwrap();
    assert_eq!(cli.viewers.viewers_group.as_deref(), Some("adm"));
    assert_eq!(cli.viewers.viewers_listen.map(|a| a.port()), Some(10136));
    assert!(cli.viewers.given());
    let cli =
        Cli::try_parse_from(["iotop-bpf", "serve", "--viewers-socket", "/tmp/v.sock"]).unwrap();
    let Some(Command::Serve(serve)) = cli.command else {
        panic!("not serve")
    };
    assert_eq!(
        serve.viewers.viewers_socket.as_deref(),
        Some(std::path::Path::new("/tmp/v.sock"))
    );
    let cli = Cli::try_parse_from(["iotop-bpf", "attach", "db01:10136"]).unwrap();
    let Some(Command::Attach(attach)) = cli.command else {
        panic!("not attach")
    };
    assert_eq!(attach.target.as_deref(), Some("db01:10136"));
    let err = Cli::try_parse_from(["iotop-bpf", "--viewers-listen", ":0"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("viewers need to know where to attach"),
        "{err}"
    );
}

#[test]
fn exporter_options() {
    let cli = Cli::try_parse_from(["iotop-bpf", "serve"]).unwrap();
    let Some(Command::Serve(serve)) = cli.command else {
        panic!("not serve")
    };
    assert_eq!(serve.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(
        (serve.top, serve.delay),
        (DEFAULT_TOP, Duration::from_secs(1))
    );
    let cli =
        Cli::try_parse_from(["iotop-bpf", "--json", "--listen", ":9999", "--top", "5"]).unwrap();
    assert_eq!(cli.listen.map(|a| a.port()), Some(9999));
    assert_eq!(cli.top, 5);
    for bad in [
        &["iotop-bpf", "--top", "5"][..],
        &["iotop-bpf", "serve", "--top", "0"],
        &["iotop-bpf", "serve", "--top", "100000"],
        &["iotop-bpf", "serve", "--listen", "nowhere"],
        &["iotop-bpf", "--listen", "1.2.3.4:70000"],
        &["iotop-bpf", "--viewers-listen", ":0"],
        &["iotop-bpf", "--no-viewers", "--viewers-group", "adm"],
        &["iotop-bpf", "attach", "a", "b"],
    ] {
        let err = Cli::try_parse_from(bad).unwrap_err().to_string();
        assert!(err.contains("error:"), "{bad:?}: {err}");
    }
}
