//! Certificates and keys of a test cluster: one CA, a serving certificate per apiserver and the
//! service-account signing key pair. All generated fresh per cluster with rcgen.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// A PEM certificate and its PEM (PKCS#8) private key.
pub(crate) struct CertAndKey {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

/// The cluster CA. Its certificate goes into every kubeconfig.
pub(crate) struct Ca {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub(crate) fn generate(cluster_name: &str) -> anyhow::Result<Self> {
        let key = KeyPair::generate().context("generating the CA key")?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(&format!("k0s-autopilot test CA ({cluster_name})"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).context("self-signing the CA")?;
        let key_pem = key.serialize_pem();
        Ok(Self { cert_pem: cert.pem(), key_pem, issuer: Issuer::new(params, key) })
    }

    pub(crate) fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key (PKCS#8 PEM): what an operator signs client certificates with.
    pub(crate) fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A serving certificate for an apiserver on `ip`, also valid for 127.0.0.1 and localhost
    /// (and the in-cluster `kubernetes` names, for good measure).
    pub(crate) fn serving_cert(&self, ip: Ipv4Addr) -> anyhow::Result<CertAndKey> {
        let key = KeyPair::generate().context("generating a serving key")?;
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
        ])?;
        params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(ip)));
        if ip != Ipv4Addr::LOCALHOST {
            params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        }
        params.distinguished_name = name("kube-apiserver");
        params.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).context("signing a serving cert")?;
        Ok(CertAndKey { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// The service-account token signing key pair: (private key PEM, public key PEM).
pub(crate) fn service_account_keys() -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate().context("generating the service-account key")?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}
