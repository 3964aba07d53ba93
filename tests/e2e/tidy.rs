//! Tidy checks of the repository's own text, after rust-analyzer's `tidy`
//! tests: what the documents, comments, `--help` texts, examples and
//! packaged files say about the repository must be true of it.
//!
//! - Every document they cite (`docs/mig.md §6.3`, `formats.md §6`,
//!   `/usr/share/doc/gpu-agent/dvfs.md §3`) exists, and so does every
//!   numbered section they cite in it; every path from the repository's
//!   root they name (`agent/daemon/src/engine/mig_apply.rs`, `plugins/edl`)
//!   exists.
//! - The files the packages install, and the manual pages (the `--help` text
//!   of every command), cite documents by the path the package installs them
//!   at, and the package installs them; the example files the help names
//!   exist.
//! - Every source file of every crate appears in ARCHITECTURE.md's code map,
//!   by a name that singles out its crate or where the map is about its crate.
//! - Every invariant ARCHITECTURE.md numbers is cited ("invariant 12") by a
//!   code comment that relies on it, and no comment cites one it lacks.
//!
//! Each rule's finder is a function of the texts, and a test feeds it a
//! broken tree to show that it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::artefacts;

/// Where the package installs the documents.
const DOC_DIR: &str = "/usr/share/doc/gpu-agent/";

/// Names that stand for a file the reader chooses (`FILE.md`), not a
/// document.
const PLACEHOLDERS: &[&str] = &["FILE", "NAME", "OUT", "REPORT"];

/// This file, whose tests' trees cite what does not exist on purpose.
const THIS_FILE: &str = "tests/e2e/tidy.rs";

/// Directories that hold no file of the repository (.gitignore's, and git's).
const SKIPPED_DIRS: &[&str] = &["target", ".git", "packaging/build"];

/// The repository's text files by path (relative, `/`-separated).
type Tree = BTreeMap<String, String>;

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Every text file of the repository but the build outputs.
fn repository() -> Tree {
    fn walk(root: &Path, dir: &Path, tree: &mut Tree) {
        for entry in std::fs::read_dir(dir).expect("read a directory") {
            let path = entry.expect("a directory entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .to_str()
                .expect("a utf-8 path")
                .to_string();
            if path.is_dir() {
                if !SKIPPED_DIRS.contains(&rel.as_str()) && !rel.ends_with("/target") {
                    walk(root, &path, tree);
                }
            } else if !is_task_output(&rel) {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    tree.insert(rel, text);
                }
            }
        }
    }
    let root = root();
    let mut tree = Tree::new();
    walk(&root, &root, &mut tree);
    tree
}

/// Whether `rel` is a task's output that `gpuctl submit` left where it was
/// typed (.gitignore's `/gpu-agent-*.out`), not a file of the repository.
fn is_task_output(rel: &str) -> bool {
    !rel.contains('/') && rel.starts_with("gpu-agent-") && rel.ends_with(".out")
}

/// A document cited in a text: the name as written, the sections after it
/// (`6.3` of `§6.3`), and the line.
#[derive(Debug, Clone, PartialEq)]
struct Citation {
    name: String,
    sections: Vec<String>,
    line: usize,
}

/// Characters of a path as the texts write one.
fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// The `.md` documents `text` cites, with the sections after each
/// (`mig.md §6.1, §6.5`, `dvfs.md §3–§4`, `mig.md §4–5`). Not citations:
/// [`PLACEHOLDERS`], names given to a command-line option (a file it
/// writes: `--markdown table.md`) and web addresses.
fn citations(text: &str) -> Vec<Citation> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices(".md") {
        let end = at + 3;
        // A longer name (`x.md5`, `x.md.bak`), not a sentence's full stop.
        let mut next = text[end..].chars();
        if match next.next() {
            Some('.') => next.next().is_some_and(|c| c.is_ascii_alphanumeric()),
            Some(c) => path_char(c),
            None => false,
        } {
            continue;
        }
        let start = text[..at]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| path_char(c))
            .last()
            .map_or(at, |(i, _)| i);
        let name = &text[start..end];
        let stem = name
            .rsplit('/')
            .next()
            .unwrap_or(name)
            .trim_end_matches(".md");
        let before = text[..start].trim_end_matches([' ', '=']);
        let option = before
            .rsplit(char::is_whitespace)
            .next()
            .is_some_and(|w| w.trim_start_matches(['(', '[', '`']).starts_with("--"))
            && start > before.len();
        if stem.is_empty() || PLACEHOLDERS.contains(&stem) || text[..start].ends_with(':') || option
        {
            continue;
        }
        found.push(Citation {
            name: name.to_string(),
            sections: sections_after(&text[end..]),
            line: text[..at].matches('\n').count() + 1,
        });
    }
    found
}

/// The sections cited right after a document's name: `§6.1`, then more
/// joined by `, `, ` and `, `–`, `-` or a comment's line break.
fn sections_after(rest: &str) -> Vec<String> {
    let mut sections = Vec::new();
    let mut rest = rest;
    loop {
        let trimmed = rest.trim_start_matches([' ', '\n', '/', '!', '#', ',', '–', '-']);
        let trimmed = trimmed.strip_prefix("and ").unwrap_or(trimmed);
        let Some(after) = trimmed.strip_prefix('§') else {
            // A range's end may drop its `§` (`§4–5`).
            if !sections.is_empty() && rest.starts_with(['–', '-']) {
                let number: String = rest[rest.chars().next().map_or(0, char::len_utf8)..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let number = number.trim_end_matches('.').to_string();
                if !number.is_empty() {
                    rest = &rest[rest.chars().next().map_or(0, char::len_utf8) + number.len()..];
                    sections.push(number);
                    continue;
                }
            }
            return sections;
        };
        let number: String = after
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let number = number.trim_end_matches('.').to_string();
        if number.is_empty() {
            return sections;
        }
        rest = &after[number.len()..];
        sections.push(number);
    }
}

/// The numbered sections of a Markdown document: `## 6. Title` gives `6`,
/// `### 6.3 Title` gives `6.3`.
fn numbered_sections(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| l.trim_start_matches('#').trim_start())
        .filter_map(|l| {
            let number: String = l
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            (!number.is_empty()).then(|| number.to_string())
        })
        .collect()
}

/// The part of file `path` whose citations count: code comments in Rust,
/// Python and shell files (their strings are checked where they are shown:
/// the help texts below, the files the programs write), all of any other.
fn cited_text(path: &str, text: &str) -> String {
    let marker = if path.ends_with(".rs") {
        "//"
    } else if path.ends_with(".py") || path.ends_with(".sh") {
        "#"
    } else {
        return text.to_string();
    };
    text.lines()
        .map(|l| l.find(marker).map_or("", |i| &l[i..]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a document named `name` in the repository file `from` is: beside
/// it, from the root, or in docs/; `None` if nowhere.
fn resolve<'t>(tree: &'t Tree, installed: &Installed, from: &str, name: &str) -> Option<&'t str> {
    if let Some(file) = name.strip_prefix(DOC_DIR) {
        let source = installed.get(file)?;
        return tree.get(source).map(String::as_str);
    }
    let dir = from.rsplit_once('/').map_or("", |(dir, _)| dir);
    [
        format!("{dir}/{name}"),
        name.to_string(),
        format!("docs/{name}"),
    ]
    .iter()
    .find_map(|p| tree.get(&normalised(p)?).map(String::as_str))
}

/// `path` with its `.` and `..` steps taken (`None`: it leaves the root).
fn normalised(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            _ => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// What the package installs under [`DOC_DIR`]: installed name -> source
/// path in the repository.
type Installed = BTreeMap<String, String>;

/// The .deb's assets (`agent/daemon/Cargo.toml`): (source, destination),
/// both relative to the repository root, globs expanded against `tree`.
fn package_assets(tree: &Tree) -> Vec<(String, String)> {
    let manifest: toml::Table = tree["agent/daemon/Cargo.toml"]
        .parse()
        .expect("a TOML manifest");
    let assets = manifest["package"]["metadata"]["deb"]["assets"]
        .as_array()
        .expect("deb assets");
    let mut out = Vec::new();
    for asset in assets {
        let source = asset[0].as_str().expect("an asset's source");
        let dest = asset[1].as_str().expect("an asset's destination");
        let source = source
            .strip_prefix("../../")
            .expect("a path from agent/daemon");
        let dest = format!("/{dest}");
        match source.split_once('*') {
            Some((dir, suffix)) => {
                for path in tree.keys() {
                    let Some(name) = path.strip_prefix(dir).and_then(|n| n.strip_suffix(suffix))
                    else {
                        continue;
                    };
                    if !name.contains('/') {
                        out.push((path.clone(), format!("{dest}{name}{suffix}")));
                    }
                }
            }
            None if dest.ends_with('/') => {
                let name = source.rsplit('/').next().expect("a file name");
                out.push((source.to_string(), format!("{dest}{name}")));
            }
            None => out.push((source.to_string(), dest)),
        }
    }
    out
}

/// The documents the package installs under [`DOC_DIR`].
fn installed_docs(assets: &[(String, String)]) -> Installed {
    assets
        .iter()
        .filter_map(|(source, dest)| {
            Some((dest.strip_prefix(DOC_DIR)?.to_string(), source.clone()))
        })
        .collect()
}

/// Each citation in `tree` of a document or section that does not exist.
fn missing_citations(tree: &Tree, installed: &Installed) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in tree {
        if path.starts_with("tests/fixture-plugins/") || path == THIS_FILE {
            continue;
        }
        for c in citations(&cited_text(path, text)) {
            check_citation(tree, installed, path, &c, &mut found);
        }
    }
    found
}

/// Adds to `found` what is wrong with citation `c` in `path`.
fn check_citation(
    tree: &Tree,
    installed: &Installed,
    path: &str,
    c: &Citation,
    found: &mut Vec<String>,
) {
    let Some(doc) = resolve(tree, installed, path, &c.name) else {
        found.push(format!(
            "{path}:{}: cites {}, which does not exist",
            c.line, c.name
        ));
        return;
    };
    let have = numbered_sections(doc);
    for s in &c.sections {
        if !have.contains(s) {
            found.push(format!(
                "{path}:{}: cites {} §{s}, which it does not have",
                c.line, c.name
            ));
        }
    }
}

/// Each citation in an installed text (`installed`: its installed path and
/// text) of a document the package does not install at the path written:
/// an installed file can only reach what is installed. The documents under
/// [`DOC_DIR`] cite each other by their bare names, as they lie side by
/// side, and may name a file of the source by its path in the repository
/// (`evidence/dvfs/report.md`), as they name source files; README.md, the
/// repository's front page, is exempt (its links are the repository's).
fn uninstalled_citations(
    tree: &Tree,
    docs: &Installed,
    installed: &[(String, String)],
) -> Vec<String> {
    let mut found = Vec::new();
    for (at, text) in installed {
        if at == &format!("{DOC_DIR}README.md") {
            continue;
        }
        let doc = at.starts_with(DOC_DIR);
        for c in citations(text) {
            if doc && c.name.contains('/') && !c.name.starts_with('/') {
                if !tree.contains_key(&c.name) {
                    found.push(format!(
                        "{at}:{}: cites {}, which does not exist",
                        c.line, c.name
                    ));
                }
                continue;
            }
            let name = match at.rsplit_once('/') {
                Some((dir, _)) if doc && !c.name.starts_with('/') => format!("{dir}/{}", c.name),
                _ => c.name.clone(),
            };
            if !name.starts_with(DOC_DIR) {
                found.push(format!(
                    "{at}:{}: cites {}, which is not where the package installs documents ({DOC_DIR})",
                    c.line, c.name
                ));
                continue;
            }
            check_citation(tree, docs, at, &Citation { name, ..c }, &mut found);
        }
    }
    found
}

/// The packaged text files: (installed path, text).
fn packaged_texts(tree: &Tree, assets: &[(String, String)]) -> Vec<(String, String)> {
    assets
        .iter()
        .filter_map(|(source, dest)| Some((dest.clone(), tree.get(source)?.clone())))
        .collect()
}

/// The manual pages of both binaries (their `--help` texts and examples),
/// as plain text: (page, text).
fn manual_pages() -> Vec<(String, String)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(artefacts().join("gpuctl"))
        .arg("manpages")
        .arg(dir.path())
        .output()
        .expect("run gpuctl manpages");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let daemon = Command::new(artefacts().join("gpu-agentd"))
        .arg("--manpage")
        .output()
        .expect("run gpu-agentd --manpage");
    assert!(
        daemon.status.success(),
        "{}",
        String::from_utf8_lossy(&daemon.stderr)
    );
    let mut pages = vec![(
        "gpu-agentd.8".to_string(),
        String::from_utf8(daemon.stdout).expect("utf-8"),
    )];
    for entry in std::fs::read_dir(dir.path()).expect("read the pages") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a name")
            .to_string();
        pages.push((name, std::fs::read_to_string(&path).expect("a page")));
    }
    pages
        .into_iter()
        .map(|(name, roff)| (name, roff.replace("\\-", "-").replace("\\(em", "—")))
        .collect()
}

/// The repository paths (`examples/…`) that `text` names and `tree` lacks.
fn missing_examples(page: &str, text: &str, tree: &Tree) -> Vec<String> {
    text.match_indices("examples/")
        .filter(|(at, _)| !text[..*at].ends_with(|c: char| path_char(c)))
        .map(|(at, _)| {
            let name: String = text[at..].chars().take_while(|&c| path_char(c)).collect();
            name.trim_end_matches('.').to_string()
        })
        .filter(|name| !tree.contains_key(name))
        .map(|name| format!("{page}: names {name}, which does not exist"))
        .collect()
}

/// The crates: each directory with a `Cargo.toml` (the fixture plugins' own
/// workspace left out), with its short name (the package's, less
/// `gpu-agent-`; `core`, `policy-edl`).
fn crates(tree: &Tree) -> Vec<(&str, &str)> {
    tree.iter()
        .filter_map(|(path, text)| {
            let dir = path.strip_suffix("/Cargo.toml")?;
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))?
                .trim_end_matches('"');
            (!dir.starts_with("tests/fixture-plugins"))
                .then(|| (dir, name.strip_prefix("gpu-agent-").unwrap_or(name)))
        })
        .collect()
}

/// The source files of the crates (every `.rs` file but those of the
/// fixture plugins' own workspace) that ARCHITECTURE.md's code map does
/// not name.
///
/// A name is a path's last steps (`mig_apply.rs`, `engine/mig_apply.rs`,
/// `plugins/edl/src/params.rs`) or a pattern whose `*` stands for part of
/// one step (`daemon_*.rs`, `commands/*.rs`: each file directly in a
/// `commands` directory). A name that fits files of one crate names them
/// wherever it stands; one that fits files of several crates (`tests.rs`,
/// `mig.rs`, `params.rs`) names only those of the crates its place in the
/// map is about: a list item whose lead (up to its first `:`) names the
/// crate (`` - `agent/backend`: ``, `` - `plugins/edl` ``), a table row
/// whose crate column does (`core`, `` `gpu-agent-dbus` ``), a `###`
/// section whose heading or first line does ("The daemon, module by
/// module"), or, for a nested item, the item it is in. A module's root (`lib.rs`, `main.rs`, `mod.rs`) is named with
/// its crate or directory.
fn unmapped_sources(tree: &Tree) -> Vec<String> {
    let architecture = &tree["ARCHITECTURE.md"];
    let map = architecture
        .split("\n## ")
        .find(|s| s.starts_with("Code map"))
        .expect("ARCHITECTURE.md has a code map");
    let crates = crates(tree);
    let crate_of = |path: &str| {
        crates
            .iter()
            .filter(|(dir, _)| path.starts_with(dir) && path[dir.len()..].starts_with('/'))
            .max_by_key(|(dir, _)| dir.len())
            .map(|(dir, _)| *dir)
    };
    // The crates a lead names, by directory or short name.
    let named_crates = |lead: &str| -> BTreeSet<&str> {
        lead.split(|c: char| !path_char(c))
            .flat_map(|word| {
                crates.iter().filter(move |(dir, name)| {
                    word == *name
                        || word.strip_prefix("gpu-agent-") == Some(*name)
                        || word
                            .strip_prefix(*dir)
                            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
                })
            })
            .map(|(dir, _)| *dir)
            .collect()
    };
    let sources: Vec<&str> = tree
        .keys()
        .map(String::as_str)
        .filter(|p| p.ends_with(".rs") && !p.starts_with("tests/fixture-plugins/"))
        .filter(|p| !matches!(p.rsplit('/').next(), Some("lib.rs" | "main.rs" | "mod.rs")))
        .collect();
    // One path step against one step of a pattern.
    let step = |pattern: &str, step: &str| match pattern.split_once('*') {
        Some((head, tail)) => {
            step.len() >= head.len() + tail.len() && step.starts_with(head) && step.ends_with(tail)
        }
        None => pattern == step,
    };
    let fits = |name: &str, path: &str| {
        let mut steps = path.rsplit('/');
        name.rsplit('/')
            .all(|p| steps.next().is_some_and(|s| step(p, s)))
    };
    // The map cut into its parts: list items, table rows and `###`
    // sections' first lines, each with the crates it is about.
    let mut named: BTreeSet<&str> = BTreeSet::new();
    let mut section: BTreeSet<&str> = BTreeSet::new();
    let mut part: Vec<&str> = Vec::new();
    let mut about: BTreeSet<&str> = BTreeSet::new();
    // What the last item that is not nested is about.
    let mut parent: BTreeSet<&str> = BTreeSet::new();
    // A section's first line names its crate (`agent/daemon/src`).
    let mut first_line = false;
    let mut close = |part: &mut Vec<&str>, about: &BTreeSet<&str>| {
        for name in part
            .iter()
            .flat_map(|line| line.split(|c: char| !(path_char(c) || c == '*')))
            .filter(|w| w.ends_with(".rs"))
        {
            let fitting: Vec<&str> = sources.iter().copied().filter(|p| fits(name, p)).collect();
            let in_crates: BTreeSet<Option<&str>> = fitting.iter().map(|p| crate_of(p)).collect();
            named.extend(fitting.into_iter().filter(|p| {
                in_crates.len() == 1 || crate_of(p).is_some_and(|c| about.contains(c))
            }));
        }
        part.clear();
    };
    for line in map.lines() {
        let item = line.trim_start();
        let heading = line.strip_prefix("### ");
        if item.starts_with("- ") || item.starts_with('|') || heading.is_some() {
            close(&mut part, &about);
            if let Some(heading) = heading {
                section = named_crates(heading);
                first_line = true;
            }
            let lead = match item.strip_prefix('|') {
                Some(row) => row.split('|').nth(1).unwrap_or(""),
                None => item.split(':').next().unwrap_or(""),
            };
            about = section.union(&named_crates(lead)).copied().collect();
            if line.starts_with(' ') {
                // A nested item is about its parent's crates too.
                about.extend(parent.iter().copied());
            } else {
                parent = about.clone();
            }
        } else if first_line && !line.is_empty() {
            first_line = false;
            section.extend(named_crates(line));
            about.extend(named_crates(line));
        }
        part.push(line);
    }
    close(&mut part, &about);
    sources
        .into_iter()
        .filter(|p| !named.contains(p))
        .map(|p| format!("{p}: not in ARCHITECTURE.md's code map"))
        .collect()
}

/// The invariants ARCHITECTURE.md numbers (`12. **One thread owns the
/// state.**`).
fn numbered_invariants(architecture: &str) -> BTreeSet<u32> {
    let section = architecture
        .split("\n## ")
        .find(|s| s.starts_with("Invariants"))
        .expect("ARCHITECTURE.md has invariants");
    section
        .lines()
        .filter_map(|l| {
            let (number, rest) = l.split_once(". ")?;
            rest.starts_with("**").then(|| number.trim().parse().ok())?
        })
        .collect()
}

/// The invariant numbers code comments cite: "invariant 12", "invariants
/// 5 and 22".
fn cited_invariants(tree: &Tree) -> BTreeMap<u32, Vec<String>> {
    let mut cited: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (path, text) in tree.iter().filter(|(p, _)| p.ends_with(".rs")) {
        for (n, line) in cited_text(path, text).lines().enumerate() {
            let lower = line.to_lowercase();
            for (at, word) in lower.match_indices("invariant") {
                let rest = lower[at + word.len()..].trim_start_matches('s');
                let mut numbers = rest.trim_start();
                while let Some(digits) = numbers
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .filter(|d| !d.is_empty())
                {
                    let number = digits.parse().expect("digits");
                    cited
                        .entry(number)
                        .or_default()
                        .push(format!("{path}:{}", n + 1));
                    numbers = numbers[digits.len()..]
                        .trim_start_matches([',', ' '])
                        .trim_start_matches("and ");
                }
            }
        }
    }
    cited
}

/// Each path from the repository's root (its first step one of the root's
/// directories: `agent/core/src/task.rs`, `plugins/edl/`) that the texts
/// name and `tree` lacks, as a file or a directory. Not checked: patterns
/// (`plugins/*/Cargo.toml`), placeholders (`plugins/<name>/`,
/// `examples/NAME`) and build outputs ([`SKIPPED_DIRS`]).
fn missing_paths(tree: &Tree) -> Vec<String> {
    let roots: BTreeSet<&str> = tree
        .keys()
        .filter_map(|p| p.split_once('/').map(|(root, _)| root))
        .collect();
    let exists = |path: &str| {
        let path = path.trim_end_matches('/');
        tree.contains_key(path)
            || tree
                .range(format!("{path}/")..)
                .next()
                .is_some_and(|(p, _)| p.starts_with(&format!("{path}/")))
    };
    let mut found = Vec::new();
    for (file, text) in tree {
        if file.starts_with("tests/fixture-plugins/") || file == THIS_FILE {
            continue;
        }
        let text = cited_text(file, text);
        for (at, _) in text.match_indices('/') {
            let start = text[..at]
                .char_indices()
                .rev()
                .take_while(|&(_, c)| path_char(c) || matches!(c, '*' | '<' | '>'))
                .last()
                .map_or(at, |(i, _)| i);
            let root = &text[start..at];
            if !roots.contains(root) || text[..start].ends_with(|c: char| path_char(c) || c == ':')
            {
                continue;
            }
            // Only the first `/` of a path starts it.
            let path: String = text[start..]
                .chars()
                .take_while(|&c| path_char(c) || matches!(c, '*' | '<' | '>'))
                .collect();
            let path = path.trim_end_matches('.');
            let placeholder = path.contains(['*', '<', '>'])
                || path
                    .split('/')
                    .any(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_uppercase()));
            let built = SKIPPED_DIRS
                .iter()
                .any(|d| path == *d || path.starts_with(&format!("{d}/")));
            if !placeholder && !built && !exists(path) {
                let line = text[..at].matches('\n').count() + 1;
                found.push(format!("{file}:{line}: names {path}, which does not exist"));
            }
        }
    }
    found.dedup();
    found
}

/// Each numbered invariant no code comment cites, and each cited one that
/// ARCHITECTURE.md does not number.
fn uncited_invariants(tree: &Tree) -> Vec<String> {
    let numbered = numbered_invariants(&tree["ARCHITECTURE.md"]);
    let cited = cited_invariants(tree);
    let mut found: Vec<String> = numbered
        .iter()
        .filter(|n| !cited.contains_key(n))
        .map(|n| format!("invariant {n}: no code comment cites it"))
        .collect();
    for (n, places) in &cited {
        if !numbered.contains(n) {
            found.push(format!(
                "{}: cites invariant {n}, which ARCHITECTURE.md does not number",
                places[0]
            ));
        }
    }
    found
}

#[test]
fn every_cited_document_and_section_exists() {
    let tree = repository();
    let installed = installed_docs(&package_assets(&tree));
    assert_eq!(missing_citations(&tree, &installed), Vec::<String>::new());
}

#[test]
fn installed_files_and_help_texts_cite_installed_documents() {
    let tree = repository();
    let assets = package_assets(&tree);
    let docs = installed_docs(&assets);
    let mut texts = packaged_texts(&tree, &assets);
    let pages = manual_pages();
    let mut found: Vec<String> = pages
        .iter()
        .flat_map(|(page, text)| missing_examples(page, text, &tree))
        .collect();
    texts.extend(pages);
    found.extend(uninstalled_citations(&tree, &docs, &texts));
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn every_named_path_exists() {
    assert_eq!(missing_paths(&repository()), Vec::<String>::new());
}

#[test]
fn every_source_file_is_in_the_code_map() {
    assert_eq!(unmapped_sources(&repository()), Vec::<String>::new());
}

#[test]
fn every_invariant_is_cited_by_the_code_that_relies_on_it() {
    assert_eq!(uncited_invariants(&repository()), Vec::<String>::new());
}

/// A small tree with one of each problem.
fn broken_tree() -> Tree {
    let files = [
        (
            "ARCHITECTURE.md",
            "# Architecture\n\n## Code map\n\n- `core`: `a.rs`, `mig.rs`, tests `e2e_*.rs`, `commands/*.rs`.\n\
             `tests/e2e/gone.rs`, `agent/core/src/`, `packaging/build/bin`, `plugins/<name>/`.\n\
             - `plugins/<name>/`: `params.rs`; b's is `plugins/b/src/params.rs`.\n\n\
             ## Invariants\n\n1. **One.** Text.\n2. **Two.** Text.\n\n## Other\n`b.rs`\n",
        ),
        (
            "agent/daemon/Cargo.toml",
            "[package]\nname = \"d\"\n[package.metadata.deb]\nassets = [\n\
             [\"../../docs/*.md\", \"usr/share/doc/gpu-agent/\", \"644\"],\n\
             [\"../../packaging/agent.toml\", \"etc/gpu-agent/agent.toml\", \"644\"],\n]\n",
        ),
        (
            "docs/mig.md",
            "# MIG\n## 1. Model\n### 1.2 Rules\nSee formats.md §9.\nSource: examples/x.md.\n",
        ),
        ("docs/formats.md", "# Formats\n## 1. Trace\n"),
        (
            "packaging/agent.toml",
            "# (docs/mig.md §1.2) (/usr/share/doc/gpu-agent/mig.md §1.2) (/usr/share/doc/gpu-agent/policies.md)\n",
        ),
        (
            "agent/core/src/a.rs",
            "//! (docs/mig.md §1.2, §1.3; invariant 1; design.md)\nfn f() { let s = \"spec.md\"; }\n",
        ),
        (
            "agent/core/src/b.rs",
            "// invariant 3 (docs/dvfs.md §1; ../shared/spec/dvfs-energy.md)\n",
        ),
        (
            "agent/core/src/lib.rs",
            "//! mig.md §1–2 (--markdown out.md) (FILE.md) agent/core/src/gone, agent/core/src/a.rs.\n",
        ),
        ("tests/e2e/e2e_x.rs", "// https://example.org/x.md\n"),
        ("agent/cli/src/commands/submit.rs", ""),
        ("agent/cli/src/commands/mig/plan.rs", ""),
        // Two crates with a `mig.rs` each, two plugins with a `params.rs`
        // each: a bare name counts only where the map is about its crate.
        ("agent/core/Cargo.toml", "[package]\nname = \"gpu-agent-core\"\n"),
        ("agent/core/src/mig.rs", ""),
        ("agent/cli/Cargo.toml", "[package]\nname = \"gpu-agent-cli\"\n"),
        ("agent/cli/src/mig.rs", ""),
        ("plugins/a/Cargo.toml", "[package]\nname = \"gpu-agent-policy-a\"\n"),
        ("plugins/a/src/params.rs", ""),
        ("plugins/b/Cargo.toml", "[package]\nname = \"gpu-agent-policy-b\"\n"),
        ("plugins/b/src/params.rs", ""),
    ];
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[test]
fn a_missing_document_or_section_is_caught() {
    let tree = broken_tree();
    let installed = installed_docs(&package_assets(&tree));
    assert_eq!(
        missing_citations(&tree, &installed),
        vec![
            "agent/core/src/a.rs:1: cites docs/mig.md §1.3, which it does not have",
            "agent/core/src/a.rs:1: cites design.md, which does not exist",
            "agent/core/src/b.rs:1: cites docs/dvfs.md, which does not exist",
            "agent/core/src/b.rs:1: cites ../shared/spec/dvfs-energy.md, which does not exist",
            "agent/core/src/lib.rs:1: cites mig.md §2, which it does not have",
            "docs/mig.md:4: cites formats.md §9, which it does not have",
            "docs/mig.md:5: cites examples/x.md, which does not exist",
            "packaging/agent.toml:1: cites /usr/share/doc/gpu-agent/policies.md, which does not exist",
        ]
    );
}

#[test]
fn an_installed_file_citing_a_repository_path_is_caught() {
    let tree = broken_tree();
    let assets = package_assets(&tree);
    let docs = installed_docs(&assets);
    let mut texts = packaged_texts(&tree, &assets);
    texts.push((
        "gpuctl-simulate.1".into(),
        "see docs/formats.md; --host examples/none.toml".into(),
    ));
    let mut found = missing_examples("gpuctl-simulate.1", &texts[texts.len() - 1].1, &tree);
    found.extend(uninstalled_citations(&tree, &docs, &texts));
    assert_eq!(
        found,
        vec![
            "gpuctl-simulate.1: names examples/none.toml, which does not exist",
            "/usr/share/doc/gpu-agent/mig.md:4: cites /usr/share/doc/gpu-agent/formats.md §9, which it does not have",
            "/usr/share/doc/gpu-agent/mig.md:5: cites examples/x.md, which does not exist",
            "/etc/gpu-agent/agent.toml:1: cites docs/mig.md, which is not where the package installs documents (/usr/share/doc/gpu-agent/)",
            "/etc/gpu-agent/agent.toml:1: cites /usr/share/doc/gpu-agent/policies.md, which does not exist",
            "gpuctl-simulate.1:1: cites docs/formats.md, which is not where the package installs documents (/usr/share/doc/gpu-agent/)",
        ]
    );
}

#[test]
fn a_missing_path_is_caught() {
    assert_eq!(
        missing_paths(&broken_tree()),
        vec![
            "ARCHITECTURE.md:6: names tests/e2e/gone.rs, which does not exist",
            "agent/core/src/b.rs:1: names docs/dvfs.md, which does not exist",
            "agent/core/src/lib.rs:1: names agent/core/src/gone, which does not exist",
        ]
    );
}

#[test]
fn a_file_missing_from_the_code_map_is_caught() {
    assert_eq!(
        unmapped_sources(&broken_tree()),
        vec![
            "agent/cli/src/commands/mig/plan.rs: not in ARCHITECTURE.md's code map",
            // Named `mig.rs` only in the core's item.
            "agent/cli/src/mig.rs: not in ARCHITECTURE.md's code map",
            "agent/core/src/b.rs: not in ARCHITECTURE.md's code map",
            // `params.rs` in an item about no one crate.
            "plugins/a/src/params.rs: not in ARCHITECTURE.md's code map",
        ]
    );
}

#[test]
fn an_uncited_or_unknown_invariant_is_caught() {
    assert_eq!(
        uncited_invariants(&broken_tree()),
        vec![
            "invariant 2: no code comment cites it",
            "agent/core/src/b.rs:1: cites invariant 3, which ARCHITECTURE.md does not number",
        ]
    );
}
