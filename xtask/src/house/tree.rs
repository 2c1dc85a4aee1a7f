//! The module tree of the crates: what each file declares, re-exports and names.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

use super::{
    CrateSrc,
    drawing::{Drawing, Site},
    scan::{Named, Start, scan},
};

/// Every module of the crates, their re-exports, and the paths their files name.
pub(super) struct Tree {
    /// Module path -> whether it is test code (a `#[cfg(test)]` module or inside one).
    pub(super) modules: BTreeMap<Vec<String>, bool>,
    /// (module, name) -> the path it re-exports.
    pub(super) reexports: HashMap<(Vec<String>, String), Vec<String>>,
    /// (the naming module, its file, what it names).
    pub(super) named: Vec<(Vec<String>, PathBuf, Named)>,
}

impl Tree {
    pub(super) fn read(
        crates: &[CrateSrc],
        externs: &HashMap<String, Vec<String>>,
    ) -> Result<Tree> {
        let mut scans = Vec::new();
        for krate in crates {
            // Walk the `mod x;` declarations from the root file: a module's file is `x.rs`
            // or `x/mod.rs` beside its parent's (in its directory for `mod.rs` and roots).
            let mut todo = vec![(krate.dir.join(krate.root), krate.mount.clone(), false, true)];
            while let Some((file, module, test, is_dir_owner)) = todo.pop() {
                let src = fs::read_to_string(&file)
                    .with_context(|| format!("read {}", file.display()))?;
                let scan = scan(&src, &krate.mount, &module, test, externs);
                let dir = if is_dir_owner {
                    file.parent().map(Path::to_path_buf).unwrap_or_default()
                } else {
                    file.with_extension("")
                };
                for (child, child_test) in &scan.files {
                    let name = child.last().cloned().unwrap_or_default();
                    // Inline modules' children live in a directory named after them.
                    let inline_dirs: PathBuf =
                        child[module.len()..child.len() - 1].iter().collect();
                    let base = dir.join(inline_dirs);
                    let flat = base.join(format!("{name}.rs"));
                    let (path, owner) = if flat.exists() {
                        (flat, false)
                    } else {
                        (base.join(&name).join("mod.rs"), true)
                    };
                    todo.push((path, child.clone(), *child_test, owner));
                }
                scans.push((module, file, test, scan));
            }
        }
        let mut tree = Tree {
            modules: BTreeMap::new(),
            reexports: HashMap::new(),
            named: Vec::new(),
        };
        for (module, _, test, scan) in &scans {
            tree.modules.insert(module.clone(), *test);
            for (m, test) in &scan.inline {
                tree.modules.insert(m.clone(), *test);
            }
        }
        for (module, file, _, scan) in scans {
            for r in scan.reexports {
                if let Some(path) = tree.absolute(&r.start, &r.rest) {
                    tree.reexports.insert((r.module, r.name), path);
                }
            }
            for named in scan.named {
                tree.named.push((module.clone(), file.clone(), named));
            }
        }
        Ok(tree)
    }

    /// A path from its start: a `use` of a plain name that is no child module names another
    /// crate (`std`, `serde`), which the drawing leaves out.
    pub(super) fn absolute(&self, start: &Start, rest: &[String]) -> Option<Vec<String>> {
        match start {
            Start::Abs(base) => Some(base.iter().chain(rest).cloned().collect()),
            Start::Child(module) => {
                let mut child = module.clone();
                child.push(rest.first()?.clone());
                self.modules
                    .contains_key(&child)
                    .then(|| module.iter().chain(rest).cloned().collect())
            }
        }
    }

    /// The module a path ends in, seen through re-exports: `model::Snapshot` is in
    /// `model::snapshot` when the model's root says `pub use snapshot::Snapshot`.
    pub(super) fn resolve(&self, path: &[String]) -> Vec<String> {
        let mut path = path.to_vec();
        for _ in 0..16 {
            let module_len = (0..=path.len())
                .rev()
                .find(|&n| self.modules.contains_key(&path[..n]) || n == 0)
                .unwrap_or(0);
            let Some(name) = path.get(module_len) else {
                return path;
            };
            let key = (path[..module_len].to_vec(), name.clone());
            match self.reexports.get(&key) {
                Some(target) if target != &path[..=module_len] => {
                    let mut next = target.clone();
                    next.extend_from_slice(&path[module_len + 1..]);
                    path = next;
                }
                _ => return path[..module_len].to_vec(),
            }
        }
        path
    }

    /// The drawing of the rooms below `scope` (one level down), each arrow with where it is
    /// named. `tops` are rooms drawn even when nothing is declared below the scope for them
    /// (the binary's `main`, which also holds the items of the library's root).
    pub(super) fn drawing(&self, scope: &[&str], tops: &[&str]) -> Drawing {
        let scope: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
        let room_of = |path: &[String]| -> Option<String> {
            if !path.starts_with(&scope) {
                return None;
            }
            match path.get(scope.len()) {
                // A `#[cfg(test)]` module (`tests`, `fixtures`) is no room: its arrows are
                // the harness's, which may reach anywhere.
                Some(_) if self.modules.get(&path[..=scope.len()]) == Some(&true) => None,
                Some(room) => Some(room.clone()),
                // The scope's own items (the model's `FastMap`): its front door.
                None if !scope.is_empty() => Some("(root)".into()),
                // The library's root holds the binary's `main` (`main.rs` only calls it): its
                // arrows are the first top room's.
                None => tops.first().map(|top| top.to_string()),
            }
        };
        let mut drawing = Drawing::default();
        for m in self.modules.keys() {
            if let Some(room) = room_of(m) {
                drawing.rooms.insert(room);
            }
        }
        drawing.rooms.extend(tops.iter().map(|t| t.to_string()));
        drawing.rooms.remove("(root)");
        for (module, file, named) in &self.named {
            let Some(from) = room_of(module) else {
                continue;
            };
            let Some(path) = self.absolute(&named.start, &named.rest) else {
                continue;
            };
            let Some(to) = room_of(&self.resolve(&path)) else {
                continue;
            };
            if from == to {
                continue;
            }
            for room in [&from, &to] {
                drawing.rooms.insert(room.clone());
            }
            let site = Site {
                file: file.clone(),
                line: named.line,
                test: named.test,
            };
            drawing.arrows.entry((from, to)).or_default().push(site);
        }
        drawing
    }
}
