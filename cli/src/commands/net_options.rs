//! The guest's network, declared once for the commands that create a
//! sandbox (`run`, `shell`, `sandbox create`): `--allow-net RULE` and
//! `--secret NAME[=VALUE]@HOST[,HOST...]`.
//!
//! Both are parsed as the command line is, so a bad rule or secret is a
//! usage error before anything boots. [`NetOptions`] is flattened into
//! [`VmOptions`](super::vm_options::VmOptions); `sandbox create` carries it
//! to the daemon in the create request (mapped in `daemon::wire`), and both
//! sides turn it into the library's options with [`NetOptions::network`].
//!
//! A secret's value is held in [`SecretValue`], whose `Debug` does not show
//! it, and no message here ever contains it.

use std::fmt;

use airlock::network::secrets::Secrets;
use airlock::{HostAccess, NetRule, NetworkOptions, NetworkPolicy, Secret};
use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

/// The network options of a command that creates a sandbox.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct NetOptions {
    /// Give the guest a network that reaches only what a rule allows
    /// (every other connection and DNS query is refused; without this
    /// or --secret the guest has no network at all). RULE: a name
    /// (example.com), every name under one (*.example.com), an address
    /// (192.0.2.1, ::1) or a range (10.0.0.0/8), each optionally with
    /// :PORT (`[::1]:443` for IPv6). A name may not resolve to a loopback,
    /// private or link-local address unless a range rule allows it.
    /// Repeatable; `airlock sandbox net ID` changes the rules later.
    #[arg(long = "allow-net", value_name = "RULE", value_parser = parse_rule)]
    pub allow_net: Vec<NetRule>,

    /// Bind a credential to hosts: the guest's environment variable NAME
    /// holds only a placeholder, which the host replaces with VALUE in
    /// HTTPS and HTTP requests to HOST (a name, or *.suffix; HOST also
    /// needs an --allow-net rule). NAME@HOST,... takes VALUE from
    /// airlock's own environment variable NAME, which keeps it off the
    /// command line. The value is never printed or logged. Repeatable.
    #[arg(
        long = "secret",
        value_name = "NAME[=VALUE]@HOST[,HOST...]",
        value_parser = SecretParser
    )]
    pub secrets: Vec<SecretArg>,
}

impl NetOptions {
    /// Whether the guest gets a network.
    pub fn is_on(&self) -> bool {
        !self.allow_net.is_empty() || !self.secrets.is_empty()
    }

    /// The library's network options, or `None` for no network; a
    /// message when the secrets do not go together (two of one name).
    pub fn network(&self) -> Result<Option<NetworkOptions>, String> {
        if !self.is_on() {
            return Ok(None);
        }
        let secrets: Vec<Secret> = self
            .secrets
            .iter()
            .map(SecretArg::secret)
            .collect::<Result<_, _>>()?;
        // Checked here, before a boot, rather than when the gateway is made.
        Secrets::new(secrets.clone()).map_err(|e| airlock::error_chain(&e))?;
        let policy = NetworkPolicy::from_rules(self.allow_net.iter().cloned());
        // A sandbox the CLI starts itself is the machine's owner's, run by
        // them at their own host: its rules may name the host's loopback
        // (a server decides for its own sandboxes: `serve --host-access`).
        let options = secrets.into_iter().fold(
            NetworkOptions::new()
                .policy(policy)
                .host_access(HostAccess::Allowed),
            NetworkOptions::secret,
        );
        Ok(Some(options))
    }
}

/// Parses a rule as `--allow-net` and `sandbox net --allow/--deny` take it;
/// the error quotes it.
pub fn parse_rule(text: &str) -> Result<NetRule, airlock::network::policy::ParseRuleError> {
    text.parse()
}

/// A secret's value: compared and cloned, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// The value itself, for the library or the daemon's request only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One `--secret`: a name, its value and the hosts it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretArg {
    pub name: String,
    pub value: SecretValue,
    pub hosts: Vec<String>,
}

impl SecretArg {
    /// The library's secret, checked on its own (name, value, hosts).
    pub fn secret(&self) -> Result<Secret, String> {
        let secret = Secret::new(self.name.clone(), self.value.expose())
            .map_err(|e| e.to_string())?
            .hosts(&self.hosts);
        Secrets::new(vec![secret.clone()]).map_err(|e| airlock::error_chain(&e))?;
        Ok(secret)
    }

    /// Parses `NAME=VALUE@HOST[,HOST...]` (split at the last `@`, so a
    /// value may hold one) or `NAME@HOST[,HOST...]` with the value of
    /// `lookup(NAME)`. No error message contains the value.
    fn parse(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<SecretArg, String> {
        const SHAPE: &str = "a secret is NAME=VALUE@HOST[,HOST...], or NAME@HOST[,HOST...] \
                             with VALUE in airlock's environment variable NAME";
        let Some((binding, hosts)) = text.rsplit_once('@') else {
            return Err(SHAPE.to_owned());
        };
        let hosts: Vec<String> = hosts.split(',').map(|h| h.trim().to_owned()).collect();
        if hosts.iter().any(String::is_empty) {
            return Err(SHAPE.to_owned());
        }
        let (name, value) = match binding.split_once('=') {
            Some((name, value)) => (name.to_owned(), value.to_owned()),
            // Not echoed: it may be a value written without its NAME=.
            None if !Secret::is_valid_name(binding) => return Err(SHAPE.to_owned()),
            None => {
                let value = lookup(binding).ok_or_else(|| {
                    format!(
                        "secret {binding:?}: {binding} is not set in airlock's environment; \
                         export it, or write {binding}=VALUE@HOST"
                    )
                })?;
                (binding.to_owned(), value)
            }
        };
        let arg = SecretArg {
            name,
            value: SecretValue(value),
            hosts,
        };
        arg.secret()?;
        Ok(arg)
    }
}

/// `--secret`'s parser. Not a plain function: clap quotes a refused value
/// in its message, and this one must not appear.
#[derive(Debug, Clone, Copy)]
struct SecretParser;

impl TypedValueParser for SecretParser {
    type Value = SecretArg;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<SecretArg, clap::Error> {
        let flag = arg.map_or_else(|| "--secret".to_owned(), ToString::to_string);
        let refuse = |message: String| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid value for '{flag}': {message}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| refuse("not UTF-8".to_owned()))?;
        SecretArg::parse(text, |name| std::env::var(name).ok()).map_err(refuse)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Parsed {
        #[command(flatten)]
        options: NetOptions,
    }

    fn parse(args: &[&str]) -> Result<NetOptions, clap::Error> {
        let argv = [&["airlock"], args].concat();
        Parsed::try_parse_from(argv).map(|parsed| parsed.options)
    }

    #[test]
    fn no_flag_is_no_network() {
        let options = parse(&[]).unwrap();
        assert!(!options.is_on());
        assert!(options.network().unwrap().is_none());
    }

    #[test]
    fn rules_parse_and_a_bad_one_is_quoted() {
        let options = parse(&[
            "--allow-net",
            "example.com",
            "--allow-net",
            "10.0.0.0/8:5432",
        ])
        .unwrap();
        let rules: Vec<String> = options.allow_net.iter().map(ToString::to_string).collect();
        assert_eq!(rules, ["example.com", "10.0.0.0/8:5432"]);
        assert!(options.network().unwrap().is_some());
        let error = parse(&["--allow-net", "10.0.0.1/8"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"10.0.0.1/8\""), "{error}");
        assert!(error.contains("10.0.0.0/8"), "suggests the range: {error}");
    }

    #[test]
    fn a_secret_takes_its_value_inline_or_from_the_environment() {
        let env = |name: &str| (name == "TOKEN").then(|| "from-env".to_owned());
        let inline = SecretArg::parse("API_KEY=sk-1@2@api.test,*.example.com", env).unwrap();
        assert_eq!(inline.name, "API_KEY");
        assert_eq!(inline.value.expose(), "sk-1@2", "split at the last @");
        assert_eq!(inline.hosts, ["api.test", "*.example.com"]);
        let from_env = SecretArg::parse("TOKEN@api.test", env).unwrap();
        assert_eq!(from_env.value.expose(), "from-env");
        let unset = SecretArg::parse("UNSET@api.test", env).unwrap_err();
        assert!(unset.contains("UNSET is not set"), "{unset}");
    }

    #[test]
    fn refused_secrets_never_show_the_value() {
        let value = "sk-very-secret-value";
        for text in [
            format!("API_KEY={value}"),
            format!("API_KEY={value}@"),
            format!("API_KEY={value}@bad host!"),
            format!("1BAD={value}@api.test"),
            format!("{value}@api.test"),
        ] {
            let error = parse(&["--secret", &text]).unwrap_err().to_string();
            assert!(!error.contains(value), "{error}");
            assert!(error.contains("--secret"), "{error}");
        }
        let options = parse(&["--secret", &format!("API_KEY={value}@api.test")]).unwrap();
        assert!(!format!("{options:?}").contains(value));
        assert!(options.network().unwrap().is_some(), "a secret turns it on");
    }

    #[test]
    fn two_secrets_of_one_name_are_refused_before_a_boot() {
        let options = parse(&["--secret", "A=1@x.test", "--secret", "A=2@y.test"]).unwrap();
        let error = options.network().unwrap_err();
        assert!(error.contains("two secrets are named A"), "{error}");
    }
}
