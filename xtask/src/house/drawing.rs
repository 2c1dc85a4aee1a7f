//! The drawing: rooms, arrows, floors, arrows back up and circles.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::Write as _,
    path::{Path, PathBuf},
};

use crate::util::root_dir;

#[derive(Debug, Clone)]
pub(super) struct Site {
    pub(super) file: PathBuf,
    pub(super) line: usize,
    pub(super) test: bool,
}

#[derive(Debug, Default)]
pub(super) struct Drawing {
    pub(super) rooms: BTreeSet<String>,
    /// (from, to) -> every place that names the path.
    pub(super) arrows: BTreeMap<(String, String), Vec<Site>>,
}

impl Drawing {
    pub(super) fn targets(&self, room: &str) -> Vec<&str> {
        self.arrows
            .keys()
            .filter(|(from, _)| from == room)
            .map(|(_, to)| to.as_str())
            .collect()
    }

    /// The rooms from the top down, so that as few arrows as can be run back up (Eades, Lin
    /// and Smyth's greedy order; an arrow weighs a thousand and the places that name it, a
    /// test's one): rooms that
    /// import nothing left go to the bottom, rooms nothing left imports to the top, and
    /// otherwise the room whose arrows out most outweigh its arrows in goes up next.
    pub(super) fn order(&self) -> Vec<String> {
        // A test's arrow weighs little: a unit test may drive its room from above.
        let weight = |from: &str, to: &str| {
            self.arrows
                .get(&(from.to_string(), to.to_string()))
                .map_or(0, |sites| {
                    let shipped = sites.iter().filter(|s| !s.test).count() as i64;
                    if shipped == 0 {
                        1
                    } else {
                        1000 + shipped.min(100)
                    }
                })
        };
        let mut left: BTreeSet<&str> = self.rooms.iter().map(String::as_str).collect();
        let mut top = Vec::new();
        let mut bottom = Vec::new();
        while !left.is_empty() {
            let sink = left
                .iter()
                .copied()
                .find(|r| !left.iter().any(|to| to != r && weight(r, to) > 0));
            if let Some(room) = sink {
                bottom.push(room.to_string());
                left.remove(room);
                continue;
            }
            let source = left
                .iter()
                .copied()
                .find(|r| !left.iter().any(|from| from != r && weight(from, r) > 0));
            let room = source.unwrap_or_else(|| {
                let balance = |r: &str| {
                    left.iter()
                        .map(|o| weight(r, o) - weight(o, r))
                        .sum::<i64>()
                };
                let mut best = *left.iter().next().expect("not empty");
                for &r in &left {
                    if balance(r) > balance(best) {
                        best = r;
                    }
                }
                best
            });
            top.push(room.to_string());
            left.remove(room);
        }
        top.extend(bottom.into_iter().rev());
        top
    }

    /// The arrows that run back up: from a room to one drawn above it in [`Drawing::order`].
    /// Each circle has at least one; without circles there are none.
    pub(super) fn back_arrows(&self) -> Vec<(String, String)> {
        let order = self.order();
        let rank = |r: &str| order.iter().position(|o| o == r).unwrap_or(0);
        self.arrows
            .keys()
            .filter(|(from, to)| rank(from) > rank(to))
            .cloned()
            .collect()
    }

    /// Each room's floor: the longest path down from it over the arrows that do not run back
    /// up (floor 1 imports nothing).
    pub(super) fn floor_of(&self) -> BTreeMap<String, usize> {
        let back: BTreeSet<(String, String)> = self.back_arrows().into_iter().collect();
        let mut floors: BTreeMap<String, usize> = BTreeMap::new();
        fn floor(
            d: &Drawing,
            room: &str,
            back: &BTreeSet<(String, String)>,
            floors: &mut BTreeMap<String, usize>,
        ) -> usize {
            if let Some(&f) = floors.get(room) {
                return f;
            }
            let f = 1 + d
                .targets(room)
                .into_iter()
                .filter(|to| !back.contains(&(room.to_string(), to.to_string())))
                .map(|to| floor(d, to, back, floors))
                .max()
                .unwrap_or(0);
            floors.insert(room.to_string(), f);
            f
        }
        for room in &self.rooms {
            floor(self, room, &back, &mut floors);
        }
        floors
    }

    pub(super) fn floors(&self) -> usize {
        self.floor_of().values().copied().max().unwrap_or(0)
    }

    /// The circles: sets of two or more rooms that all reach each other (Tarjan).
    pub(super) fn circles(&self) -> Vec<Vec<String>> {
        struct Walk<'a> {
            d: &'a Drawing,
            index: HashMap<&'a str, usize>,
            low: HashMap<&'a str, usize>,
            on_stack: BTreeSet<&'a str>,
            stack: Vec<&'a str>,
            out: Vec<Vec<String>>,
        }
        fn visit<'a>(w: &mut Walk<'a>, room: &'a str) {
            let n = w.index.len();
            w.index.insert(room, n);
            w.low.insert(room, n);
            w.stack.push(room);
            w.on_stack.insert(room);
            for to in w.d.targets(room) {
                if !w.index.contains_key(to) {
                    visit(w, to);
                    let low = w.low[room].min(w.low[to]);
                    w.low.insert(room, low);
                } else if w.on_stack.contains(to) {
                    let low = w.low[room].min(w.index[to]);
                    w.low.insert(room, low);
                }
            }
            if w.low[room] == w.index[room] {
                let mut set = Vec::new();
                while let Some(top) = w.stack.pop() {
                    w.on_stack.remove(top);
                    set.push(top.to_string());
                    if top == room {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    w.out.push(set);
                }
            }
        }
        let mut w = Walk {
            d: self,
            index: HashMap::new(),
            low: HashMap::new(),
            on_stack: BTreeSet::new(),
            stack: Vec::new(),
            out: Vec::new(),
        };
        for room in &self.rooms {
            if !w.index.contains_key(room.as_str()) {
                visit(&mut w, room);
            }
        }
        w.out.sort();
        w.out
    }

    /// The drawing as text: floors top down with each room's arrows, then what is wrong.
    pub(super) fn describe(&self, title: &str) -> String {
        let floors = self.floor_of();
        let top = floors.values().copied().max().unwrap_or(0);
        let back = self.back_arrows();
        let circles = self.circles();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{title}: {} rooms on {top} floors, {} arrows, {} back up, {} circles",
            self.rooms.len(),
            self.arrows.len(),
            back.len(),
            circles.len()
        );
        let root = root_dir();
        let rel = |p: &Path| p.strip_prefix(&root).unwrap_or(p).display().to_string();
        for f in (1..=top).rev() {
            let rooms: Vec<&String> = floors
                .iter()
                .filter(|(_, v)| **v == f)
                .map(|(r, _)| r)
                .collect();
            let _ = writeln!(s, "  floor {f}:");
            for room in rooms {
                let targets: Vec<String> = self
                    .targets(room)
                    .into_iter()
                    .map(|to| {
                        let sites = &self.arrows[&(room.clone(), to.to_string())];
                        if sites.iter().all(|site| site.test) {
                            format!("{to} (tests)")
                        } else {
                            to.to_string()
                        }
                    })
                    .collect();
                let _ = writeln!(s, "    {room:<12} -> {}", targets.join(", "));
            }
        }
        for (from, to) in &back {
            let _ = writeln!(s, "  BACK UP: {from} -> {to}, named at:");
            for site in &self.arrows[&(from.clone(), to.clone())] {
                let _ = writeln!(
                    s,
                    "    {}:{}{}",
                    rel(&site.file),
                    site.line,
                    if site.test { " (tests)" } else { "" }
                );
            }
        }
        for circle in &circles {
            let _ = writeln!(s, "  CIRCLE: {}", circle.join(", "));
        }
        s
    }
}
