//! The code's layout as ARCHITECTURE.md and the invariants describe it: every path the map
//! names is there, and the adapters reach the store only through the orchestrator.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds the tests crate")
        .to_path_buf()
}

/// Every file and folder of the repository (relative, with `/`), but build output and git.
fn paths(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("a readable folder")
            .flatten()
        {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if name == "target" || name.starts_with('.') {
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                out.push(format!("{relative}/"));
                todo.push(path);
            } else {
                out.push(relative);
            }
        }
    }
    out
}

/// The paths a Markdown text names in code spans: `a/b.rs`, `b.rs::function`, `folder/`.
fn named_paths(markdown: &str) -> Vec<String> {
    markdown
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| {
            let path = span.split("::").next().unwrap_or_default();
            let file = [".rs", ".md", ".toml", ".sql"]
                .iter()
                .any(|ext| path.ends_with(ext));
            let folder = path.ends_with('/') && path.len() > 1;
            let plain = path
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
            ((file || folder) && plain && !path.contains("..")).then(|| path.to_string())
        })
        .collect()
}

#[test]
fn every_path_architecture_names_exists() {
    let root = root();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let named = named_paths(&map);
    assert!(named.len() > 50, "the map names the code: {named:?}");
    let all = paths(&root);
    let missing: Vec<&String> = named
        .iter()
        .filter(|name| {
            !all.iter()
                .any(|p| p == *name || p.ends_with(&format!("/{name}")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn the_reader_of_the_map_finds_a_missing_path() {
    let named = named_paths("the poll loop (`telegram/polling_loop.rs`), `mod.rs::run`");
    assert_eq!(named, ["telegram/polling_loop.rs", "mod.rs"]);
    let all = paths(&root());
    assert!(!all.iter().any(|p| p.ends_with("/telegram/polling_loop.rs")));
}

/// The places (`adapters/src/path:line`) in the adapters' code whose line `matches`.
fn adapter_lines_where(matches: impl Fn(&str) -> bool) -> Vec<String> {
    let adapters = root().join("adapters/src");
    let mut found = Vec::new();
    for path in paths(&adapters) {
        if !path.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(adapters.join(&path)).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            if matches(line) {
                found.push(format!("adapters/src/{path}:{}", n + 1));
            }
        }
    }
    found
}

#[test]
fn the_adapters_never_touch_the_store() {
    let offenders = adapter_lines_where(|line| {
        line.contains(".store()") || line.contains("kaiwa_core::store::")
    });
    assert!(
        offenders.is_empty(),
        "adapters reach the store only through the orchestrator: {offenders:?}"
    );
}

#[test]
fn the_adapters_use_only_their_handle_of_the_orchestrator() {
    let offenders = adapter_lines_where(|line| {
        let code = line.split("//").next().unwrap_or_default();
        // the type, named or imported (`OrchestratorError` is the handle's error type)
        let named = [
            "<Orchestrator>",
            "&Orchestrator",
            "Orchestrator::",
            "orchestrator::Orchestrator;",
            "{Orchestrator,",
            " Orchestrator,",
            " Orchestrator}",
        ]
        .iter()
        .any(|p| code.contains(p));
        named || code.contains("ForPeople") || code.contains("ForInstances")
    });
    assert!(
        offenders.is_empty(),
        "adapters hold `ForAdapters`, not the orchestrator or another caller's handle: {offenders:?}"
    );
}
