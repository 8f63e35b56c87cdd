//! `docs/man/`: one man page per command and subcommand of `k0s`, generated from the same
//! clap definition the binary parses with (clap_mangen), so they cannot drift: this test
//! fails when a committed page differs from what would be generated, is missing or is
//! extra. `K0S_UPDATE_DOCS=1 cargo test -p k0s --test man` writes them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::CommandFactory as _;
use k0s::cli::Cli;

fn man_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/man")
}

/// File name → page, for `command` (named `name`) and every subcommand under it.
fn pages(command: &clap::Command, name: &str, into: &mut BTreeMap<String, Vec<u8>>) {
    let command = command.clone().display_name(name.to_owned());
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page).expect("rendering a man page");
    into.insert(format!("{name}.1"), page);
    for sub in command.get_subcommands().filter(|sub| sub.get_name() != "help") {
        pages(sub, &format!("{name}-{}", sub.get_name()), into);
    }
}

#[test]
fn the_man_pages_match_the_command_line() {
    let mut wanted = BTreeMap::new();
    let mut command = Cli::command();
    command.build();
    pages(&command, "k0s", &mut wanted);
    assert!(wanted.contains_key("k0s-autopilot-rollback.1"), "{:?}", wanted.keys());
    let dir = man_dir();
    if std::env::var_os("K0S_UPDATE_DOCS").is_some() {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("removing docs/man");
        }
        std::fs::create_dir_all(&dir).expect("creating docs/man");
        for (file, page) in &wanted {
            std::fs::write(dir.join(file), page).expect("writing a man page");
        }
        return;
    }
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("docs/man exists") {
        let path = entry.expect("a docs/man entry").path();
        let file = path.file_name().expect("a file name").to_string_lossy().into_owned();
        found.insert(file, std::fs::read(&path).expect("reading a man page"));
    }
    let stale: Vec<&String> = wanted
        .keys()
        .chain(found.keys())
        .filter(|file| wanted.get(*file) != found.get(*file))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/man is out of date for {stale:?}: run `K0S_UPDATE_DOCS=1 cargo test -p k0s --test \
         man` and commit docs/man"
    );
}
