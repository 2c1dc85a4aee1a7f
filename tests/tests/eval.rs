//! The real-program corpus (`tests/corpus/`, see `tests/src/eval.rs`): every workload must
//! raise what an engineer would expect and nothing else that is `WARN` or `CRIT`. The table
//! goes to `target/eval/corpus.md` (and into the README); `cargo xtask eval` prints it.

use iotop_bpf_integration::{eval, require_root};

#[test]
#[ignore = "needs root: run with `cargo xtask test` or `cargo xtask eval`"]
fn real_programs_get_the_findings_they_deserve() {
    if !require_root("real_programs_get_the_findings_they_deserve") {
        return;
    }
    let filter = std::env::var("IOTOP_BPF_EVAL_FILTER").ok();
    let report = eval::run(filter.as_deref());
    let table = report.markdown();
    println!("{table}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/eval");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("corpus.md"), &table).unwrap();
    let wrong: Vec<String> = report
        .cells
        .iter()
        .filter(|c| !c.correct())
        .map(|c| {
            format!(
                "{} on {}: expected {:?}, raised {:#?}",
                c.workload, c.fs, c.expected, c.raised
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{}\n{}", table, wrong.join("\n"));
}
