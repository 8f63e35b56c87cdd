//! What `k0s controller --run-components` runs: kube-apiserver against an external etcd,
//! kube-controller-manager and kube-scheduler (both leader-elected among the controllers),
//! from the staged components, supervised.
//!
//! The certificates and keys come from `--pki-dir` (default `<data-dir>/pki/`), named as
//! k0s names them: `ca.crt` (the cluster CA: client certificates, kubelets), `server.crt` and
//! `server.key` (the API server's serving certificate), `sa.key` and `sa.pub` (service
//! account tokens), `ca.key` when present (the controller-manager signs CSRs with it). The
//! controller-manager and the scheduler reach the API server with `controller-manager.conf`
//! and `scheduler.conf` from the same directory unless flags name others.

use std::{
    ffi::OsString,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, ensure};
use autopilot_shell::health::Health;
use autopilot_shell::lifecycle::{Component, Env, Exit, Purpose, Running};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::{
    health::{self, Seen},
    restart::Backoff,
    supervise::{Child, Supervised},
    worker::{Layout, seen, stage_components},
};

/// The components a controller runs, in the order they start.
pub const CONTROLLER_COMPONENTS: [&str; 3] =
    ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];

/// How long each component gets to stop after SIGTERM (the API server drains its
/// requests).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The flags of `k0s controller` that choose to run the control-plane components.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ControllerComponentArgs {
    /// Run kube-apiserver (serving on `--api-address`), kube-controller-manager and
    /// kube-scheduler from the components this binary carries (`k0s components`), staged into
    /// `<data-dir>/bin/`; a component it does not carry is taken from there or from `PATH`.
    /// With `--enable-worker`, containerd and the kubelet too (as `k0s worker
    /// --run-components`; the kubelet registers the Node). Without it, `k0s controller` runs
    /// the autopilot alone, beside a control plane something else runs. The installation chooses (the unit's command line); an update
    /// never changes it.
    #[arg(long = "run-components")]
    pub run_components: bool,

    /// The etcd the API server stores the cluster in (comma-separated URLs; external
    /// storage, as k0s's `storage.type: etcd` with `externalCluster`).
    #[arg(long, value_name = "URLS", required_if_eq("run_components", "true"))]
    pub etcd_servers: Option<String>,

    /// The CA that signed etcd's serving certificate (for `https://` etcd URLs).
    #[arg(long, value_name = "PATH", requires = "etcd_servers")]
    pub etcd_cafile: Option<PathBuf>,

    /// The client certificate the API server presents to etcd.
    #[arg(long, value_name = "PATH", requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,

    /// The key of `--etcd-certfile`.
    #[arg(long, value_name = "PATH", requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,

    /// Where the control plane's certificates and keys are (see the module docs). Default:
    /// `<data-dir>/pki`.
    #[arg(long, value_name = "DIR")]
    pub pki_dir: Option<PathBuf>,

    /// The Services' virtual IP range.
    #[arg(long, default_value = "10.96.0.0/12", value_name = "CIDR")]
    pub service_cidr: String,

    /// The issuer of service account tokens.
    #[arg(long, default_value = "https://kubernetes.default.svc", value_name = "URL")]
    pub service_account_issuer: String,

    /// The kubeconfig kube-controller-manager uses. Default: `<pki-dir>/controller-manager.conf`.
    #[arg(long, value_name = "PATH")]
    pub controller_manager_kubeconfig: Option<PathBuf>,

    /// The kubeconfig kube-scheduler uses. Default: `<pki-dir>/scheduler.conf`.
    #[arg(long, value_name = "PATH")]
    pub scheduler_kubeconfig: Option<PathBuf>,

    /// Extra arguments for kube-apiserver, separated by spaces (after the ones `k0s` sets,
    /// so they win).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub apiserver_extra_args: Option<String>,

    /// Extra arguments for kube-controller-manager, separated by spaces.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub controller_manager_extra_args: Option<String>,

    /// Extra arguments for kube-scheduler, separated by spaces.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub scheduler_extra_args: Option<String>,
}

impl ControllerComponentArgs {
    /// The PKI directory for the data directory `data_dir`.
    pub fn pki_dir(&self, data_dir: &Path) -> PathBuf {
        self.pki_dir.clone().unwrap_or_else(|| data_dir.join("pki"))
    }
}

/// kube-apiserver's command line: serving on `api_address`, the cluster's state in etcd,
/// clients by certificate (and, with `--apiserver-extra-args`, tokens), authorized by the
/// Node authorizer and RBAC with `NodeRestriction`, privileged Pods allowed (as k0s runs it:
/// Pod Security decides).
pub fn apiserver_args(
    args: &ControllerComponentArgs,
    pki: &Path,
    api_address: SocketAddr,
) -> Vec<OsString> {
    let file = |name: &str| pki.join(name).display().to_string();
    let mut out: Vec<String> = vec![
        format!("--etcd-servers={}", args.etcd_servers.as_deref().unwrap_or_default()),
        format!("--bind-address={}", api_address.ip()),
        format!("--advertise-address={}", api_address.ip()),
        format!("--secure-port={}", api_address.port()),
        format!("--tls-cert-file={}", file("server.crt")),
        format!("--tls-private-key-file={}", file("server.key")),
        format!("--client-ca-file={}", file("ca.crt")),
        "--authorization-mode=Node,RBAC".to_owned(),
        "--enable-admission-plugins=NodeRestriction".to_owned(),
        "--allow-privileged=true".to_owned(),
        format!("--service-account-key-file={}", file("sa.pub")),
        format!("--service-account-signing-key-file={}", file("sa.key")),
        format!("--service-account-issuer={}", args.service_account_issuer),
        format!("--service-cluster-ip-range={}", args.service_cidr),
    ];
    for (flag, value) in [
        ("--etcd-cafile", &args.etcd_cafile),
        ("--etcd-certfile", &args.etcd_certfile),
        ("--etcd-keyfile", &args.etcd_keyfile),
    ] {
        if let Some(path) = value {
            out.push(format!("{flag}={}", path.display()));
        }
    }
    with_extra(out, args.apiserver_extra_args.as_deref())
}

/// kube-controller-manager's command line: leader-elected, every controller, service
/// account tokens signed with `sa.key`, CSRs signed with the cluster CA when its key is
/// there.
pub fn controller_manager_args(
    args: &ControllerComponentArgs,
    pki: &Path,
    ca_key_present: bool,
) -> Vec<OsString> {
    let file = |name: &str| pki.join(name).display().to_string();
    let kubeconfig = args
        .controller_manager_kubeconfig
        .clone()
        .unwrap_or_else(|| pki.join("controller-manager.conf"));
    let mut out = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=true".to_owned(),
        "--controllers=*".to_owned(),
        "--use-service-account-credentials=true".to_owned(),
        format!("--service-account-private-key-file={}", file("sa.key")),
        format!("--root-ca-file={}", file("ca.crt")),
        format!("--service-cluster-ip-range={}", args.service_cidr),
    ];
    if ca_key_present {
        out.push(format!("--cluster-signing-cert-file={}", file("ca.crt")));
        out.push(format!("--cluster-signing-key-file={}", file("ca.key")));
    }
    with_extra(out, args.controller_manager_extra_args.as_deref())
}

/// kube-scheduler's command line: leader-elected.
pub fn scheduler_args(args: &ControllerComponentArgs, pki: &Path) -> Vec<OsString> {
    let kubeconfig =
        args.scheduler_kubeconfig.clone().unwrap_or_else(|| pki.join("scheduler.conf"));
    let out =
        vec![format!("--kubeconfig={}", kubeconfig.display()), "--leader-elect=true".to_owned()];
    with_extra(out, args.scheduler_extra_args.as_deref())
}

fn with_extra(args: Vec<String>, extra: Option<&str>) -> Vec<OsString> {
    args.into_iter()
        .map(OsString::from)
        .chain(extra.unwrap_or_default().split_whitespace().map(OsString::from))
        .collect()
}

/// The control plane's components as one component of the controller process (see
/// `autopilot_shell::lifecycle`): its start stages them, checks the PKI files and starts
/// all three (the controller-manager and scheduler wait for the API server themselves); its
/// run supervises them until stopped; then it stops the scheduler, the controller-manager
/// and the API server.
pub struct ControllerComponents {
    /// The flags.
    pub args: ControllerComponentArgs,
    /// Where the API server serves (`--api-address`).
    pub api_address: SocketAddr,
    /// The restart policy of each component.
    pub backoff: Backoff,
    /// How long to wait for this controller's access at start (zero: for ever).
    pub startup_timeout: Duration,
    /// Where it says whether they are healthy (the post-update watch reads it).
    pub health: Health,
}

impl Component for ControllerComponents {
    fn name(&self) -> &'static str {
        "kube-apiserver, kube-controller-manager and kube-scheduler"
    }

    /// A new binary's trial starts them too, and passes only once its own API server
    /// answers `/readyz` at the carried version.
    fn in_trial(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        Box::pin(async move {
            let layout = Layout { data_dir: std::path::absolute(&env.data_dir)? };
            let pki = std::path::absolute(self.args.pki_dir(&layout.data_dir))?;
            for name in ["ca.crt", "server.crt", "server.key", "sa.key", "sa.pub"] {
                let path = pki.join(name);
                ensure!(
                    path.is_file(),
                    "{} is missing: the API server needs it (--pki-dir {})",
                    path.display(),
                    pki.display()
                );
            }
            let staged = stage_components(&layout, &CONTROLLER_COMPONENTS).await?;
            let path_of = |name: &str| {
                staged
                    .iter()
                    .find(|s| s.name == name)
                    .map(|s| s.path.clone())
                    .with_context(|| format!("{name} was not staged"))
            };
            let child = |name: &'static str, args: Vec<OsString>| -> anyhow::Result<Child> {
                Ok(Child {
                    name,
                    program: path_of(name)?,
                    args,
                    env: Vec::new(),
                    log_dir: layout.log_dir(),
                    run_dir: layout.run_dir(),
                    stop_grace: STOP_GRACE,
                })
            };
            let ca_key = pki.join("ca.key").is_file();
            let plan = [
                child("kube-apiserver", apiserver_args(&self.args, &pki, self.api_address))?,
                child(
                    "kube-controller-manager",
                    controller_manager_args(&self.args, &pki, ca_key),
                )?,
                child("kube-scheduler", scheduler_args(&self.args, &pki))?,
            ];
            let mut running: Vec<Supervised> = Vec::new();
            for child in plan {
                match Supervised::start(child, self.backoff).await {
                    Ok(started) => running.push(started),
                    Err(err) => {
                        for started in running.into_iter().rev() {
                            started.stop().await;
                        }
                        return Err(err);
                    }
                }
            }
            let carried =
                staged.iter().find(|s| s.name == "kube-apiserver").and_then(|s| s.version.clone());
            let mut own = env.config.clone();
            own.cluster_url = format!("https://{}", self.api_address)
                .parse()
                .context("the API address as a URL")?;
            let running = RunningControlPlane {
                running,
                own_api_server: kube::Client::try_from(own)
                    .context("a client of its own API server")?,
                api_address: self.api_address,
                carried,
                health: self.health.clone(),
            };
            if env.purpose == Purpose::Trial {
                health::until_healthy(&running, &env.data_dir).await;
            }
            if let Err(err) = wait_for_access(&env.client, self.startup_timeout).await {
                running.stop().await;
                return Err(err);
            }
            Ok(Box::new(running) as Box<dyn Running>)
        })
    }
}

/// The control plane's components, running, in start order.
struct RunningControlPlane {
    running: Vec<Supervised>,
    /// A client of this controller's own API server (the health check's).
    own_api_server: kube::Client,
    api_address: SocketAddr,
    /// The kube-apiserver version the binary carries.
    carried: Option<String>,
    health: Health,
}

impl RunningControlPlane {
    /// Stops them, the last started first.
    async fn stop(self) {
        self.health.set(false);
        for component in self.running.into_iter().rev() {
            component.stop().await;
        }
    }
}

impl health::Judged for RunningControlPlane {
    fn what(&self) -> &'static str {
        "the control plane's components"
    }

    fn health(&self) -> &Health {
        &self.health
    }

    /// What the health check sees now: the components, `/readyz` and `/version` of its own
    /// API server (each asked for at most 5 s).
    async fn seen(&self) -> Seen {
        const ASK: Duration = Duration::from_secs(5);
        let client = &self.own_api_server;
        let address = self.api_address;
        let readyz = async {
            let request = http::Request::get("/readyz").body(Vec::new())?;
            anyhow::Ok(client.request_text(request).await?)
        };
        let ready = match tokio::time::timeout(ASK, readyz).await {
            Ok(Ok(body)) if body.trim() == "ok" => Ok(()),
            Ok(Ok(body)) => {
                Err(format!("its API server at {address} is not ready: {}", body.trim()))
            }
            Ok(Err(err)) => {
                Err(format!("its API server at {address} does not answer /readyz: {err:#}"))
            }
            Err(_) => Err(format!("its API server at {address} did not answer /readyz in {ASK:?}")),
        };
        let version = match tokio::time::timeout(ASK, client.apiserver_version()).await {
            Ok(Ok(info)) => Some(info.git_version),
            Ok(Err(_)) | Err(_) => None,
        };
        Seen {
            components: self.running.iter().map(seen).collect(),
            ready,
            versioned: "kube-apiserver",
            version,
            carried: self.carried.clone(),
        }
    }
}

impl Running for RunningControlPlane {
    fn stop_unrun(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.stop().await })
    }

    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            health::judge_until(self.as_ref(), &stop).await;
            self.stop().await;
            Exit::Stopped
        })
    }
}

/// How often the wait for this controller's access asks again, and how often it says it
/// still waits.
const ACCESS_RETRY: Duration = Duration::from_secs(1);
const ACCESS_REMINDER: Duration = Duration::from_secs(30);

/// Waits until this controller's own identity may do its first write (`patch` the Plan CRD,
/// granted by `manifests/rbac/controller.yaml`), asking its API server with a
/// SelfSubjectAccessReview: a controller that runs the API server starts before anyone could
/// apply its RBAC there. Says every 30 s that it waits, and why; fails after
/// `startup_timeout` (zero: waits for ever).
async fn wait_for_access(client: &kube::Client, startup_timeout: Duration) -> anyhow::Result<()> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let reviews: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("patch".to_owned()),
                group: Some("apiextensions.k8s.io".to_owned()),
                resource: Some("customresourcedefinitions".to_owned()),
                name: Some("plans.autopilot.k0sproject.io".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let started = tokio::time::Instant::now();
    let mut last_said = None::<tokio::time::Instant>;
    loop {
        let why = match reviews.create(&Default::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => return Ok(()),
            Ok(_) => "the API server answers, but this controller's identity may not patch \
                      the autopilot CRDs yet: apply manifests/rbac/"
                .to_owned(),
            Err(err) => format!("its API server does not answer yet: {err}"),
        };
        if !startup_timeout.is_zero() && started.elapsed() >= startup_timeout {
            anyhow::bail!("waited {startup_timeout:?} for this controller's access: {why}");
        }
        if last_said.is_none_or(|said| said.elapsed() >= ACCESS_REMINDER) {
            tracing::info!(reason = %why, "waiting for this controller's access");
            last_said = Some(tokio::time::Instant::now());
        }
        tokio::time::sleep(ACCESS_RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ControllerComponentArgs {
        ControllerComponentArgs {
            run_components: true,
            etcd_servers: Some("https://10.0.0.5:2379".into()),
            etcd_cafile: Some("/etc/etcd/ca.crt".into()),
            service_cidr: "10.96.0.0/12".into(),
            service_account_issuer: "https://kubernetes.default.svc".into(),
            apiserver_extra_args: Some("--token-auth-file=/t.csv --profiling=false".into()),
            ..ControllerComponentArgs::default()
        }
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn the_api_server_serves_on_the_api_address_from_etcd_with_the_pki_dir() {
        let address: SocketAddr = "10.0.0.1:6443".parse().unwrap();
        let args = strings(apiserver_args(&args(), Path::new("/var/lib/k0s/pki"), address));
        for expected in [
            "--etcd-servers=https://10.0.0.5:2379",
            "--etcd-cafile=/etc/etcd/ca.crt",
            "--bind-address=10.0.0.1",
            "--advertise-address=10.0.0.1",
            "--secure-port=6443",
            "--tls-cert-file=/var/lib/k0s/pki/server.crt",
            "--client-ca-file=/var/lib/k0s/pki/ca.crt",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
        ] {
            assert!(args.contains(&expected.to_owned()), "{expected} in {args:?}");
        }
        assert_eq!(args[args.len() - 2..], ["--token-auth-file=/t.csv", "--profiling=false"]);
    }

    #[test]
    fn the_controller_manager_and_scheduler_elect_a_leader_and_use_their_kubeconfigs() {
        let pki = Path::new("/var/lib/k0s/pki");
        let kcm = strings(controller_manager_args(&args(), pki, false));
        assert!(kcm.contains(&"--leader-elect=true".to_owned()));
        assert!(kcm.contains(&"--kubeconfig=/var/lib/k0s/pki/controller-manager.conf".to_owned()));
        assert!(!kcm.iter().any(|a| a.starts_with("--cluster-signing")), "{kcm:?}");
        let kcm = strings(controller_manager_args(&args(), pki, true));
        assert!(kcm.contains(&"--cluster-signing-key-file=/var/lib/k0s/pki/ca.key".to_owned()));
        let mut with_own = args();
        with_own.scheduler_kubeconfig = Some("/etc/k0s/admin.conf".into());
        let scheduler = strings(scheduler_args(&with_own, pki));
        assert_eq!(scheduler, ["--kubeconfig=/etc/k0s/admin.conf", "--leader-elect=true"]);
    }
}
