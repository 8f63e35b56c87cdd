//! `docs/state-machines.md` carries the phase tables exactly as the code declares them, and
//! lists every Event reason. Regenerate the tables with `K0S_UPDATE_DOCS=1 cargo test -p autopilot-engine --test state_machine_docs`.

// This test reads (and on request rewrites) the document it checks.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;

const BEGIN: &str = "<!-- BEGIN GENERATED: plan::phases::markdown() -->\n";
const END: &str = "<!-- END GENERATED -->";

#[test]
fn state_machine_doc_matches_the_declared_phase_tables() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/state-machines.md");
    let doc = std::fs::read_to_string(&path).expect("docs/state-machines.md exists");
    let start = doc.find(BEGIN).expect("doc has the BEGIN marker") + BEGIN.len();
    let end = doc.find(END).expect("doc has the END marker");
    let tables = autopilot_engine::plan::phases::markdown();
    if std::env::var_os("K0S_UPDATE_DOCS").is_some() {
        let updated = format!("{}{tables}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).expect("write the doc");
        return;
    }
    assert_eq!(
        &doc[start..end],
        tables,
        "docs/state-machines.md is out of date: run \
         K0S_UPDATE_DOCS=1 cargo test -p autopilot-engine --test state_machine_docs"
    );
}

#[test]
fn state_machine_doc_lists_every_event_reason() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/state-machines.md");
    let doc = std::fs::read_to_string(&path).expect("docs/state-machines.md exists");
    let table = &doc[doc.find("## Events on the Plan").expect("doc has the Events section")..];
    for reason in autopilot_engine::plan::phases::reasons::ALL {
        assert!(table.contains(&format!("| `{reason}` |")), "{reason} is not in the table");
    }
}
