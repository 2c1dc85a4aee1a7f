//! The lexer, the scan and the drawing on small inputs.

use std::{collections::HashMap, path::PathBuf};

use super::{
    CRATES, crates_keep_to_their_dependencies, dependencies_outside,
    drawing::Drawing,
    impure_dependencies,
    lex::{Tok, lex},
    scan::{Named, Start, parse_tree, scan},
    sizes::{file_exception, fn_exception, fn_spans},
    tree::Tree,
    workspace_members,
};

fn words(src: &str) -> Vec<String> {
    lex(src)
        .into_iter()
        .map(|t| match t.tok {
            Tok::Ident(w) => w,
            Tok::Path => "::".into(),
            Tok::Punct(c) => c.to_string(),
        })
        .collect()
}

#[test]
fn the_lexer_drops_comments_strings_and_chars() {
    let src = r##"
        // crate::commented::out
        /* crate::block /* nested */ still::out */
        let s = "crate::in_a_string \" quoted";
        let r = r#"crate::raw "inner" "#;
        let b = b"bytes"; let c = 'q'; let e = '\''; let u = '→';
        fn f<'a>(x: &'a str) -> crate::kept::Path {}
    "##;
    let w = words(src);
    assert!(!w.iter().any(|w| matches!(
        w.as_str(),
        "commented" | "block" | "in_a_string" | "raw" | "bytes" | "q"
    )));
    let joined = w.join(" ");
    assert!(joined.contains("crate :: kept :: Path"), "{joined}");
    assert!(joined.contains("fn f < a >"), "{joined}");
}

#[test]
fn lines_are_counted_through_comments_and_strings() {
    let toks = lex("/* a\nb */ \"c\nd\"\nx");
    assert_eq!(toks.len(), 1);
    assert_eq!(toks[0].line, 4);
}

fn tree_of(src: &str) -> Vec<(Vec<String>, Option<String>)> {
    let toks = lex(src);
    parse_tree(&toks, 0)
        .0
        .into_iter()
        .map(|l| (l.segs, l.alias))
        .collect()
}

fn v(s: &str) -> Vec<String> {
    s.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn use_trees_give_every_leaf() {
    assert_eq!(
        tree_of("a::b::{c, d::{self, e as f}, g::*};"),
        vec![
            (v("a::b::c"), None),
            (v("a::b::d"), None),
            (v("a::b::d::e"), Some("f".into())),
            (v("a::b::g"), None),
        ]
    );
    assert_eq!(
        tree_of("crate::x::Y::<T>::new()"),
        vec![(v("crate::x::Y"), None)]
    );
    assert_eq!(tree_of("a::B as _;"), vec![(v("a::B"), Some("_".into()))]);
}

fn externs() -> HashMap<String, Vec<String>> {
    HashMap::from([("ext".to_string(), v("model"))])
}

fn abs(named: &[Named]) -> Vec<(Vec<String>, bool)> {
    named
        .iter()
        .filter_map(|n| match &n.start {
            Start::Abs(base) => Some((base.iter().chain(&n.rest).cloned().collect(), n.test)),
            Start::Child(_) => None,
        })
        .collect()
}

#[test]
fn a_scan_resolves_super_self_crate_and_inline_modules() {
    let src = r#"
        use crate::feed::{self, Feed};
        use super::sibling::X;
        pub(crate) use self::inner::Y as Z;
        fn f() { let _ = crate::units::count(1); x.self_len(); }
        pub(in crate::feed) fn g() {}
        mod inner { use super::super::up::W; }
        #[cfg(test)]
        mod tests { use ext::Snapshot; }
        #[cfg(any(test, feature = "fixtures"))] pub mod fixtures;
        #[cfg(not(test))] mod shipped;
        mod real;
    "#;
    let scan = scan(src, &[], &v("a::b"), false, &externs());
    assert_eq!(
        abs(&scan.named),
        vec![
            (v("feed"), false),
            (v("feed::Feed"), false),
            (v("a::sibling::X"), false),
            (v("units::count"), false),
            (v("a::up::W"), false),
            (v("model::Snapshot"), true),
        ]
    );
    assert_eq!(
        scan.inline,
        vec![(v("a::b::inner"), false), (v("a::b::tests"), true)]
    );
    assert_eq!(
        scan.files,
        vec![
            (v("a::b::fixtures"), true),
            (v("a::b::shipped"), false),
            (v("a::b::real"), false)
        ]
    );
    assert_eq!(scan.reexports.len(), 1);
    assert_eq!(scan.reexports[0].name, "Z");
}

#[test]
fn crate_paths_in_a_mounted_crate_stay_inside_it() {
    let scan = scan(
        "use crate::hist::Log2Hist;",
        &v("model"),
        &v("model::snapshot"),
        false,
        &externs(),
    );
    assert_eq!(abs(&scan.named), vec![(v("model::hist::Log2Hist"), false)]);
}

/// A tree of modules and what they name, as a drawing of the rooms under `scope`.
fn drawing(
    modules: &[&str],
    reexports: &[(&str, &str, &str)],
    named: &[(&str, &str)],
    scope: &[&str],
) -> Drawing {
    let tree = Tree {
        modules: modules
            .iter()
            .map(|m| (v(m), false))
            .chain([(vec![], false)])
            .collect(),
        reexports: reexports
            .iter()
            .map(|(m, n, p)| ((v(m), n.to_string()), v(p)))
            .collect(),
        named: named
            .iter()
            .map(|(from, path)| {
                (
                    v(from),
                    PathBuf::from("f.rs"),
                    Named {
                        start: Start::Abs(vec![]),
                        rest: v(path),
                        line: 1,
                        test: false,
                    },
                )
            })
            .collect(),
    };
    tree.drawing(scope, &[])
}

#[test]
fn re_exports_are_seen_through() {
    let d = drawing(
        &["model", "model::snapshot", "model::hist", "view"],
        &[("model", "Snapshot", "model::snapshot::Snapshot")],
        &[
            ("view", "model::Snapshot"),
            ("model::snapshot", "model::hist::Log2Hist"),
        ],
        &["model"],
    );
    assert_eq!(
        d.arrows.keys().cloned().collect::<Vec<_>>(),
        vec![("snapshot".to_string(), "hist".to_string())]
    );
    assert_eq!(d.floors(), 2);
}

#[test]
fn floors_back_arrows_and_circles() {
    // main -> app -> view -> model; model -> view runs back up; units alone.
    let d = drawing(
        &["main", "app", "view", "model", "units"],
        &[],
        &[
            ("main", "app::run"),
            ("app", "view::draw"),
            ("app", "model::X"),
            ("view", "model::Snapshot"),
            ("view", "model::Latency"),
            ("model", "view::Y"),
        ],
        &[],
    );
    assert_eq!(
        d.back_arrows(),
        vec![("model".to_string(), "view".to_string())]
    );
    assert_eq!(
        d.circles(),
        vec![vec!["model".to_string(), "view".to_string()]]
    );
    let floors = d.floor_of();
    assert_eq!(floors["main"], 4);
    assert_eq!(floors["model"], 1);
    assert_eq!(floors["units"], 1);
    assert_eq!(d.floors(), 4);
    let clean = drawing(
        &["a", "b", "c"],
        &[],
        &[("a", "b::x"), ("b", "c::y"), ("a", "c::z")],
        &[],
    );
    assert!(clean.back_arrows().is_empty());
    assert!(clean.circles().is_empty());
    assert_eq!(clean.floors(), 3);
}

#[test]
fn the_house_lists_every_member_of_the_workspace() {
    let workspace = "[workspace]\nresolver = \"3\"\nmembers = [\"common\", \"model\", \"tui\"]\n";
    assert_eq!(workspace_members(workspace), ["common", "model", "tui"]);
    // This repository's own: every member has its row.
    let root = crate::util::root_dir();
    crates_keep_to_their_dependencies(&root).unwrap();
    let mut listed: Vec<&str> = CRATES.iter().map(|(d, _)| *d).collect();
    listed.sort_unstable();
    let mut members = workspace_members(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap());
    members.sort_unstable();
    assert_eq!(members, listed);
}

#[test]
fn a_dependency_outside_a_crates_row_is_named() {
    let manifest =
        "[dependencies]\nanyhow = \"1\"\ntokio = \"1\"\n[dev-dependencies]\ninsta = \"1\"\n";
    assert_eq!(dependencies_outside(manifest, &["anyhow"]), ["tokio"]);
    assert!(dependencies_outside(manifest, &["anyhow", "tokio"]).is_empty());
}

#[test]
fn the_model_may_depend_only_on_pure_crates() {
    let manifest = r#"
        [package]
        name = "iotop-bpf-model"

        [dependencies]
        iotop-bpf-common = { workspace = true }
        serde = { workspace = true }
        # a comment = "no"
        tokio = { workspace = true }

        [target.'cfg(unix)'.dependencies]
        libc = "0.2"

        [dev-dependencies]
        insta = "1"

        [features]
        fixtures = []
    "#;
    assert_eq!(impure_dependencies(manifest), vec!["tokio", "libc"]);
    let aya = "[dependencies]\niotop-bpf-common = { workspace = true, features = [\"user\"] }";
    assert_eq!(impure_dependencies(aya), vec!["iotop-bpf-common"]);
    let pure = "[dependencies]\nserde = \"1\"\nfoldhash = \"0.2\"";
    assert!(impure_dependencies(pure).is_empty());
}

/// The (name, first line, last line) of each function in `src`.
fn spans(src: &str) -> Vec<(String, usize, usize)> {
    fn_spans(src)
        .into_iter()
        .map(|s| (s.name, s.start, s.end))
        .collect()
}

#[test]
fn a_function_runs_to_its_matching_brace() {
    let src = "fn a() {\n    if x { y() } else {\n        z();\n    }\n}\nfn b() {}\n";
    assert_eq!(spans(src), [("a".into(), 1, 5), ("b".into(), 6, 6)]);
}

#[test]
fn braces_in_strings_chars_and_comments_do_not_count() {
    let src = r#"fn a() {
    let s = "}}{";
    let c = '}';
    let r = r"{";
    // }
    /* { */
}
fn b() {}
"#;
    assert_eq!(spans(src), [("a".into(), 1, 7), ("b".into(), 8, 8)]);
}

#[test]
fn closures_belong_to_their_function_and_nested_fns_are_their_own() {
    let src = "fn outer() {\n    let f = |x| {\n        x\n    };\n    fn inner() {\n    }\n}\n";
    assert_eq!(spans(src), [("outer".into(), 1, 7), ("inner".into(), 5, 6)]);
}

#[test]
fn declarations_and_fn_pointer_types_have_no_body() {
    let src = "trait T {\n    fn a(&self);\n    fn b(&self) {}\n}\ntype F = fn(u32) -> u32;\n\
               fn c(S { x }: S, f: fn()) -> impl Fn() {\n    move || ()\n}\n";
    assert_eq!(spans(src), [("b".into(), 3, 3), ("c".into(), 6, 8)]);
}

#[test]
fn an_exception_carries_its_reason() {
    let src = "/// Doc.\n// house: long because it is a table\n#[test]\nfn t() {\n}\nfn u() {\n    // house: long because one match\n}\nfn v() {\n}\n";
    let lines: Vec<&str> = src.lines().collect();
    let why: Vec<Option<String>> = fn_spans(src)
        .iter()
        .map(|s| fn_exception(&lines, s))
        .collect();
    assert_eq!(
        why,
        [Some("it is a table".into()), Some("one match".into()), None]
    );
    assert_eq!(
        file_exception("//! Doc.\n//! house: long because generated\nuse a;\n"),
        Some("generated".into())
    );
    assert_eq!(
        file_exception("//! Doc.\nuse a;\n// house: long because no\n"),
        None
    );
}
