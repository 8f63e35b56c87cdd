//! `k0s completion <shell>`: the scripts the binary prints, and the bash one at work in a
//! real bash (sourced, then asked to complete a partial command line as bash would).

use std::process::Command;

fn k0s(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_k0s")).args(args).output().expect("k0s runs");
    assert!(output.status.success(), "k0s {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// What bash offers for the words `line` (the last one being completed), with the
/// completion function `complete -p k0s` names after sourcing the script.
fn bash_completes(script: &std::path::Path, line: &[&str]) -> Vec<String> {
    let words = line.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" ");
    let program = format!(
        r#"source '{script}'
function=$(complete -p k0s | sed -E 's/.* -F ([^ ]+) .*/\1/')
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
"$function" k0s "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        script = script.display()
    );
    let output = Command::new("bash").args(["--norc", "-c", &program]).output().expect("bash runs");
    assert!(output.status.success(), "bash: {}", String::from_utf8_lossy(&output.stderr));
    let mut offered: Vec<String> =
        String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect();
    offered.sort();
    offered
}

#[test]
fn the_bash_completion_completes_the_autopilot_verbs() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("k0s.bash");
    std::fs::write(&script, k0s(&["completion", "bash"])).unwrap();
    assert_eq!(bash_completes(&script, &["k0s", "autopilot", "p"]), ["pause", "preview"]);
    assert_eq!(bash_completes(&script, &["k0s", "autopilot", "r"]), ["resume", "rollback"]);
    let top = bash_completes(&script, &["k0s", ""]);
    for verb in ["autopilot", "completion", "controller", "status", "version", "worker"] {
        assert!(top.contains(&verb.to_owned()), "{verb} in {top:?}");
    }
}

#[test]
fn every_shell_gets_a_script_naming_the_autopilot_verbs() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let script = k0s(&["completion", shell]);
        for verb in ["autopilot", "preview", "rollback", "pause"] {
            assert!(script.contains(verb), "the {shell} script names {verb}");
        }
    }
}

#[test]
fn an_unknown_shell_is_refused_naming_the_shells() {
    let output = Command::new(env!("CARGO_BIN_EXE_k0s"))
        .args(["completion", "tcsh"])
        .output()
        .expect("k0s runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid value 'tcsh'"), "{stderr}");
    assert!(stderr.contains("bash") && stderr.contains("powershell"), "{stderr}");
}
