//! The `k0s` command line: bad input gives one clear error line and a non-zero exit, never a
//! panic; `--help` documents every controller flag.

use integration::run_k0s;

/// Assert a failed run: the given exit code, exactly one line on stderr that contains every
/// `needle`, and no panic.
fn assert_one_line_error(args: &[&str], code: i32, needles: &[&str]) {
    let output = run_k0s(args).expect("k0s runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "exit code of k0s {args:?}; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "k0s {args:?} panicked:\n{stderr}");
    let error_lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error_lines.len(), 1, "k0s {args:?} should print one error line:\n{stderr}");
    for needle in needles {
        assert!(error_lines[0].contains(needle), "error line lacks {needle:?}: {}", error_lines[0]);
    }
}

#[test]
fn a_missing_required_flag_is_named() {
    let cases: [(&[&str], &str); 3] = [
        (&["controller", "--enable-autopilot", "--kubeconfig", "/x"], "--api-address"),
        (&["autopilot", "preview", "--kubeconfig", "/x"], "--file"),
        (&["autopilot", "check"], "--file"),
    ];
    for (args, flag) in cases {
        let output = run_k0s(args).expect("k0s runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "k0s {args:?}:\n{stderr}");
        assert!(
            stderr.starts_with("error: the following required arguments were not provided"),
            "k0s {args:?}:\n{stderr}"
        );
        assert!(stderr.contains(flag), "k0s {args:?} names {flag}:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn preview_help_describes_its_own_output() {
    let output = run_k0s(&["autopilot", "preview", "--help"]).expect("k0s runs");
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(help.contains("The report as one JSON document"), "{help}");
    assert!(!help.contains("--watch") && !help.contains("status screen"), "{help}");
}

#[test]
fn version_prints_the_build_version() {
    let output = run_k0s(&["version"]).expect("k0s runs");
    assert!(output.status.success());
    let version = String::from_utf8(output.stdout).expect("utf-8");
    let version = version.trim();
    assert!(
        version.starts_with('v') && version.contains("+k0s."),
        "unexpected version {version:?}"
    );
}

#[test]
fn unknown_exclude_from_plans_value_is_rejected() {
    assert_one_line_error(
        &[
            "controller",
            "--enable-autopilot",
            "--kubeconfig",
            "/nonexistent",
            "--api-address",
            "127.0.0.2:6443",
            "--exclude-from-plans",
            "controller,bogus",
        ],
        2,
        &["bogus", "--exclude-from-plans"],
    );
}

#[test]
fn malformed_api_address_is_rejected() {
    assert_one_line_error(
        &["controller", "--enable-autopilot", "--kubeconfig", "/x", "--api-address", "nowhere"],
        2,
        &["--api-address", "nowhere"],
    );
}

#[test]
fn malformed_duration_is_rejected() {
    assert_one_line_error(
        &[
            "controller",
            "--enable-autopilot",
            "--kubeconfig",
            "/x",
            "--api-address",
            "127.0.0.2:6443",
            "--lease-duration",
            "soon",
        ],
        2,
        &["--lease-duration", "soon"],
    );
}

#[test]
fn missing_kubeconfig_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.kubeconfig");
    let missing = missing.to_str().unwrap();
    let data_dir = dir.path().join("data");
    assert_one_line_error(
        &[
            "controller",
            "--enable-autopilot",
            "--kubeconfig",
            missing,
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--node-name",
            "c0",
            "--api-address",
            "127.0.0.2:6443",
        ],
        1,
        &["kubeconfig", missing],
    );
    assert_one_line_error(
        &["worker", "--kubeconfig", missing, "--data-dir", data_dir.to_str().unwrap()],
        1,
        &["kubeconfig", missing],
    );
}

/// A kubeconfig in `dir` for a loopback port nobody listens on (bound, noted, released),
/// and that server's URL.
fn unreachable_kubeconfig(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
        ),
    )
    .expect("writing the kubeconfig");
    (kubeconfig, server)
}

#[test]
fn unreachable_api_server_fails_after_the_startup_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (kubeconfig, server) = unreachable_kubeconfig(dir.path());
    let data_dir = dir.path().join("data");
    let common = [
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--node-name",
        "n0",
        "--startup-timeout",
        "1s",
    ];
    let mut controller =
        vec!["controller", "--enable-autopilot", "--api-address", "127.0.0.2:6443"];
    controller.extend(common);
    assert_one_line_error(&controller, 1, &["cannot reach the API server", &server]);
    let mut worker = vec!["worker"];
    worker.extend(common);
    assert_one_line_error(&worker, 1, &["cannot reach the API server", &server]);
}

#[test]
fn controller_help_documents_every_design_flag() {
    let output = run_k0s(&["controller", "--help"]).expect("k0s runs");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--enable-autopilot",
        "--kubeconfig",
        "--data-dir",
        "--node-name",
        "--api-address",
        "--exclude-from-plans",
        "--enable-worker",
        "--lease-duration",
        "--renew-deadline",
        "--retry-period",
    ] {
        assert!(help.contains(flag), "`k0s controller --help` does not document {flag}:\n{help}");
    }
    assert!(help.contains("AUTOPILOT_HOSTNAME"), "the node-name env fallback is documented");
}

#[test]
fn controller_without_enable_autopilot_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    // The flag check happens before any connection, so any kubeconfig path will do.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n",
    )
    .unwrap();
    let output = run_k0s(&[
        "controller",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--node-name",
        "c0",
        "--api-address",
        "127.0.0.2:6443",
    ])
    .expect("k0s runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--enable-autopilot"), "{stderr}");
}

#[test]
fn status_without_a_running_process_names_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("nothing-runs-here");
    let data_dir = data_dir.to_str().unwrap();
    assert_one_line_error(
        &["status", "--data-dir", data_dir],
        1,
        &["no k0s process is running", data_dir],
    );
}

#[test]
fn autopilot_help_lists_the_steering_verbs_and_their_flags() {
    let output = run_k0s(&["autopilot", "--help"]).expect("k0s runs");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for verb in ["status", "preview", "check", "pause", "resume", "abort"] {
        assert!(help.contains(verb), "`k0s autopilot --help` does not list {verb}:\n{help}");
    }
    for verb in ["pause", "resume", "abort"] {
        let output = run_k0s(&["autopilot", verb, "--help"]).expect("k0s runs");
        assert!(output.status.success());
        let help = String::from_utf8(output.stdout).unwrap();
        for needle in ["--kubeconfig", "KUBECONFIG", "--plan", "[default: autopilot]"] {
            assert!(help.contains(needle), "`k0s autopilot {verb} --help` lacks {needle}:\n{help}");
        }
    }
    let output = run_k0s(&["autopilot", "pause", "--help"]).expect("k0s runs");
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(help.contains("autopilot.k0sproject.io/paused"), "names its annotation:\n{help}");
}

#[test]
fn autopilot_without_a_verb_or_with_an_unknown_one_is_a_usage_error() {
    let output = run_k0s(&["autopilot"]).expect("k0s runs");
    assert_eq!(output.status.code(), Some(2));
    assert_one_line_error(&["autopilot", "stop", "--kubeconfig", "/x"], 2, &["stop"]);
}

#[test]
fn steering_with_a_missing_kubeconfig_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.kubeconfig");
    let missing = missing.to_str().unwrap();
    for verb in ["pause", "resume", "abort"] {
        assert_one_line_error(&["autopilot", verb, "--kubeconfig", missing], 1, &[missing]);
    }
}

#[test]
fn steering_an_unreachable_api_server_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let (kubeconfig, server) = unreachable_kubeconfig(dir.path());
    for verb in ["pause", "resume", "abort"] {
        let args =
            ["autopilot", verb, "--kubeconfig", kubeconfig.to_str().unwrap(), "--plan", "p1"];
        assert_one_line_error(&args, 1, &["reading plan \"p1\"", &server]);
        // A one-shot verb logs nothing by default: the error line is all there is.
        let output = run_k0s(&args).expect("k0s runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "only the error line:\n{stderr}");
    }
}
