//! The crate's shape, read from its source: the layer rule written in `crate/lib.rs` (its
//! `// LAYERS:` line), no import circle between files, and no source file over 700 lines.
//!
//! Imports are read as the compiler would resolve their paths: `crate::a::b`, `super::` and
//! `self::` (inside inline modules too), and a parent's uses of its own child modules
//! (`child::item`), with comments, strings and characters skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

/// A module path from the crate root (`["cpu", "packed"]`), and its file.
type Module = Vec<String>;

fn crate_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crate")
}

/// Every `.rs` file under `crate/` but the binary, with its module path.
fn files() -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = crate_dir();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths
        .into_iter()
        .filter(|p| !p.starts_with(root.join("bin")))
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap().with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            (module, p)
        })
        .collect()
}

/// The source with comments, string literals and character literals blanked out (each replaced
/// by a space, newlines kept), so that only code is searched for paths and braces.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                out.push(blank(chars[j]));
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && is_char_literal(&chars, i) {
            // 'x', '\n', '\u{..}': skipped whole (a lifetime `'a` is not a literal).
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

fn is_char_literal(chars: &[char], i: usize) -> bool {
    matches!(
        (chars.get(i + 1), chars.get(i + 2)),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

/// The modules a file's code names: `crate::`, `super::` and `self::` paths (resolved against
/// the inline modules they stand in), and, in a module's own file, `child::` for its child files.
fn imports(module: &Module, code: &str, modules: &BTreeSet<Module>) -> BTreeSet<Module> {
    let children: BTreeSet<&str> = modules
        .iter()
        .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
        .map(|m| m.last().unwrap().as_str())
        .collect();
    let resolve = |path: &[String]| -> Option<Module> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| modules.contains(p))
    };
    let mut out = BTreeSet::new();
    // The inline modules the scan is inside, with the brace depth each opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let bytes = code.as_bytes();
    let mut i = 0;
    let word_at = |i: usize| -> Option<(String, usize)> {
        let start = i;
        let mut j = i;
        while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
            j += 1;
        }
        (j > start).then(|| (code[start..j].to_string(), j))
    };
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'{' {
            depth += 1;
            i += 1;
            continue;
        }
        if c == b'}' {
            depth = depth.saturating_sub(1);
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            i += 1;
            continue;
        }
        let after_ident = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if after_ident || !(c.is_ascii_alphabetic() || c == b'_') {
            i += 1;
            continue;
        }
        let Some((word, end)) = word_at(i) else {
            i += 1;
            continue;
        };
        // `mod name {` opens an inline module.
        if word == "mod" {
            let rest = code[end..].trim_start();
            if let Some((name, after)) = word_at(code.len() - rest.len())
                && code[after..].trim_start().starts_with('{')
            {
                inline.push((name, depth));
            }
            i = end;
            continue;
        }
        // A path: words joined by `::`.
        let mut path = vec![word];
        let mut j = end;
        while code[j..].starts_with("::") {
            match word_at(j + 2) {
                Some((w, e)) => {
                    path.push(w);
                    j = e;
                }
                None => break,
            }
        }
        // `crate::{a, b::c}` and `super::{...}`: each item is a path of its own.
        let mut groups: Vec<Vec<String>> = vec![path.clone()];
        if code[j..].starts_with("::{") {
            let close = code[j..].find('}').map_or(code.len(), |k| j + k);
            for item in code[j + 3..close].split(',') {
                let item: Vec<String> = item
                    .trim()
                    .split("::")
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                let mut full = path.clone();
                full.extend(item);
                groups.push(full);
            }
        }
        let here: Module = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        for p in groups {
            let absolute: Option<Vec<String>> = match p[0].as_str() {
                "crate" | "$crate" if p.len() > 1 => Some(p[1..].to_vec()),
                "super" if p.len() > 1 => {
                    let mut base = here.clone();
                    let mut rest = &p[..];
                    while rest.first().is_some_and(|w| w == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    base.extend(rest.iter().cloned());
                    Some(base)
                }
                "self" if p.len() > 1 => {
                    let mut base = here.clone();
                    base.extend(p[1..].iter().cloned());
                    Some(base)
                }
                first if inline.is_empty() && p.len() > 1 && children.contains(first) => {
                    let mut base = module.clone();
                    base.extend(p.iter().cloned());
                    Some(base)
                }
                _ => None,
            };
            if let Some(target) = absolute.and_then(|a| resolve(&a))
                && &target != module
                && !target.is_empty()
            {
                out.insert(target);
            }
        }
        i = j.max(end);
    }
    out
}

/// The layers, bottom first, from `crate/lib.rs`'s `// LAYERS: a; b c; ...` line.
fn layers() -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(crate_dir().join("lib.rs")).unwrap();
    let line = lib
        .lines()
        .find_map(|l| l.strip_prefix("// LAYERS:"))
        .expect("crate/lib.rs states the layers in a `// LAYERS:` line");
    line.split(';')
        .map(|layer| layer.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Every module's imports, by module.
fn graph() -> (
    BTreeMap<Module, PathBuf>,
    BTreeMap<Module, BTreeSet<Module>>,
) {
    let files = files();
    let modules: BTreeSet<Module> = files.keys().cloned().collect();
    let edges = files
        .iter()
        .map(|(m, path)| {
            let code = code_only(&std::fs::read_to_string(path).unwrap());
            (m.clone(), imports(m, &code, &modules))
        })
        .collect();
    (files, edges)
}

#[test]
fn every_top_level_module_is_in_one_layer_and_imports_only_layers_below() {
    let layers = layers();
    let layer_of = |top: &str| layers.iter().position(|l| l.iter().any(|m| m == top));
    let (files, edges) = graph();
    let tops: BTreeSet<&str> = files
        .keys()
        .filter_map(|m| m.first().map(String::as_str))
        .collect();
    for top in &tops {
        let places = layers.iter().filter(|l| l.iter().any(|m| m == top)).count();
        assert_eq!(
            places, 1,
            "module {top} must stand in exactly one layer of lib.rs"
        );
    }
    let mut wrong = Vec::new();
    for (from, targets) in &edges {
        let Some(from_top) = from.first() else {
            continue;
        };
        for to in targets {
            let to_top = &to[0];
            if to_top == from_top {
                continue;
            }
            let (a, b) = (layer_of(from_top).unwrap(), layer_of(to_top).unwrap());
            if b >= a {
                wrong.push(format!("{} uses {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers of crate/lib.rs (a module uses only lower layers):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    let (_, edges) = graph();
    // Strongly connected components (Tarjan), each of more than one file, are the circles.
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        circles: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let w = s.edges.get_key_value(w).map_or(w, |(k, _)| k);
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[w].min(s.low[v]);
                s.low.insert(v, low);
            } else if s.on.contains(w) {
                let low = s.index[w].min(s.low[v]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut circle = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                circle.push(w.join("::"));
                if w == v {
                    break;
                }
            }
            if circle.len() > 1 {
                s.circles.push(circle);
            }
        }
    }
    let mut s = State {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        circles: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    assert!(
        s.circles.is_empty(),
        "files that import each other: {:?}",
        s.circles
    );
}

#[test]
fn no_source_file_is_over_700_lines() {
    let long: Vec<String> = files()
        .values()
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}

/// The reader itself: it sees the paths a file uses, and none in comments or strings.
#[test]
fn the_import_reader_finds_paths_and_skips_comments_and_strings() {
    let modules: BTreeSet<Module> = [vec![], vec!["a"], vec!["b"], vec!["b", "c"], vec!["d"]]
        .into_iter()
        .map(|m| m.into_iter().map(String::from).collect())
        .collect();
    let code = code_only(
        "use crate::a::X; // crate::d\n/* crate::d */ let s = \"crate::d\"; let c = '{';\n\
         fn f() { super::b::c::y(); }\nmod t { use super::super::d::Z; }\nc::go();",
    );
    let module: Module = vec!["b".into()];
    let got = imports(&module, &code, &modules);
    let want: BTreeSet<Module> = [vec!["a"], vec!["b", "c"], vec!["d"]]
        .into_iter()
        .map(|m| m.into_iter().map(String::from).collect())
        .collect();
    assert_eq!(got, want);
}

/// Every GPU object is burn's to make (issue 77): no file of the crate creates a pipeline, a bind
/// group, a buffer, a command encoder or a query set, nor submits to a queue, itself; and burn and
/// CubeCL are named only in the GPU layer (`crate/gpu/`), so the rest of the crate runs with the
/// `gpu` feature off (the page's threaded build).
#[test]
fn gpu_objects_are_made_by_burn_and_burn_is_named_only_in_the_gpu_layer() {
    const MADE_BY_BURN: [&str; 9] = [
        "create_compute_pipeline",
        "create_bind_group",
        "create_buffer",
        "create_command_encoder",
        "create_query_set",
        "create_shader_module",
        "create_pipeline_layout",
        "queue.submit",
        "submit([",
    ];
    let mut found = Vec::new();
    for (module, path) in files() {
        let code = code_only(&std::fs::read_to_string(&path).unwrap());
        for call in MADE_BY_BURN {
            if code.contains(call) {
                found.push(format!("{} calls {call}", path.display()));
            }
        }
        let in_gpu = module.first().is_some_and(|m| m == "gpu");
        for name in ["burn_", "cubecl", "wgpu::"] {
            if !in_gpu && code.contains(name) {
                found.push(format!(
                    "{} names {name} outside crate/gpu/",
                    path.display()
                ));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
