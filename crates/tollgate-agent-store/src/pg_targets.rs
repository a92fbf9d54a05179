//! Which PostgreSQL server the store talks to, when its URL names several.
//!
//! A highly available PostgreSQL (streaming replication, Patroni, a managed service) has one primary
//! and standbys, and the primary moves on a failover. Clients of libpq reach whichever is the primary
//! with a URL that lists every member and says what the session needs:
//! `postgres://USER@pg1:5432,pg2:5432,pg3:5432/DB?target_session_attrs=read-write`. The store takes the
//! same URL: it tries the hosts in the order given and uses the first that accepts what it needs.
//!
//! - `read-write` (the default when the URL names several hosts — the store writes): a server that is
//!   not in recovery and whose sessions are not read only;
//! - `primary`: a server that is not in recovery;
//! - `any` (the default with one host): the first that answers.
//!
//! `read-only`, `standby` and `prefer-standby` are refused: a store on a standby could not write.
//!
//! The choice is made when the store opens, and again (at most once a second, one check at a time)
//! whenever a statement does not finish cleanly or a connection is slow to come: after a failover the
//! old primary is down or has become a standby, so the next statements fail, the store looks for the
//! primary again, and moves its connections there ([`crate::pg_connections`]). With one host and
//! `any` nothing of this runs: the store connects to it as it always did (one host with `read-write` or
//! `primary` is checked when the store opens).

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The URL parameter that says what a session needs (libpq's name and values).
pub(crate) const SESSION_ATTRS: &str = "target_session_attrs";

/// How long a check of one host may take (connect and ask), so that a host that does not answer at
/// all (dropped packets) does not hold up the others.
const HOST_TIMEOUT: Duration = Duration::from_secs(5);

/// What a server must be for the store to use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// Any server that answers.
    Any,
    /// Not in recovery, and sessions not read only by default.
    ReadWrite,
    /// Not in recovery.
    Primary,
}

/// The hosts of a store's URL, in order, and the one in use.
pub(crate) struct Targets {
    /// One set of connect options per host, equal in everything but the host and port.
    hosts: Vec<PgConnectOptions>,
    /// How each host is named in messages (`host:port`).
    names: Vec<String>,
    /// Each host alone as a URL (the given URL with only that host and without
    /// `target_session_attrs`; with its password, so never shown).
    urls: Vec<String>,
    wanted: Wanted,
    /// The index of the host in use.
    current: Mutex<usize>,
}

/// Names the hosts only: the options hold the password.
impl std::fmt::Debug for Targets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Targets")
            .field("hosts", &self.names)
            .field("wanted", &self.wanted)
            .field("current", &self.current_index())
            .finish()
    }
}

impl Targets {
    /// The hosts of `url`: `postgres://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]…]/DB[?…]`, with
    /// `target_session_attrs` taken out of the parameters (the rest are sqlx's).
    ///
    /// # Errors
    /// [`sqlx::Error::Configuration`] for a URL sqlx refuses, an empty host, or a `target_session_attrs`
    /// the store cannot use.
    pub(crate) fn parse(url: &str) -> Result<Targets, sqlx::Error> {
        let refuse = |message: String| sqlx::Error::Configuration(message.into());
        let (scheme, rest) = url.split_once("://").ok_or_else(|| refuse("a URL postgres://… is expected".into()))?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (tail, wanted_text) = take_parameter(tail, SESSION_ATTRS);
        let list: Vec<&str> = split_hosts(hosts);
        let several = list.len() > 1;
        let wanted = match wanted_text.as_deref() {
            None if several => Wanted::ReadWrite,
            None | Some("any") => Wanted::Any,
            Some("read-write") => Wanted::ReadWrite,
            Some("primary") => Wanted::Primary,
            Some(other @ ("read-only" | "standby" | "prefer-standby")) => {
                return Err(refuse(format!(
                    "{SESSION_ATTRS}={other}: the store writes, so it needs read-write, primary or any"
                )));
            }
            Some(other) => {
                return Err(refuse(format!(
                    "{SESSION_ATTRS}={other} is not one of read-write, primary, any (libpq's values a store can use)"
                )));
            }
        };
        let mut options = Vec::with_capacity(list.len());
        let mut names = Vec::with_capacity(list.len());
        let mut urls = Vec::with_capacity(list.len());
        for host in list {
            if host.is_empty() && several {
                return Err(refuse("an empty host in the URL's list of hosts".into()));
            }
            let single = match userinfo {
                Some(userinfo) => format!("{scheme}://{userinfo}@{host}{tail}"),
                None => format!("{scheme}://{host}{tail}"),
            };
            let parsed = PgConnectOptions::from_str(&single)?;
            names.push(format!("{}:{}", parsed.get_host(), parsed.get_port()));
            options.push(parsed);
            urls.push(single);
        }
        Ok(Targets { hosts: options, names, urls, wanted, current: Mutex::new(0) })
    }

    /// Whether the URL names more than one host (the choice of [`Targets::select`] can change).
    pub(crate) fn several(&self) -> bool {
        self.hosts.len() > 1
    }

    /// The index of the host in use.
    pub(crate) fn current_index(&self) -> usize {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connect options of the host in use.
    pub(crate) fn current(&self) -> PgConnectOptions {
        self.hosts[self.current_index()].clone()
    }

    /// `host:port` of host `index`.
    pub(crate) fn name(&self, index: usize) -> &str {
        &self.names[index]
    }

    /// Every host's `host:port`, in the URL's order.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// Host `index` alone as a URL: the given one with only that host and without
    /// `target_session_attrs` (it holds the password, if the given one did).
    pub(crate) fn url(&self, index: usize) -> &str {
        &self.urls[index]
    }

    /// Makes host `index` the one in use.
    pub(crate) fn choose(&self, index: usize) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = index.min(self.hosts.len() - 1);
    }

    /// Every host's options changed by `change` (the application name, session settings).
    pub(crate) fn map(self, change: impl Fn(PgConnectOptions) -> PgConnectOptions) -> Targets {
        let current = self.current_index();
        Targets {
            hosts: self.hosts.into_iter().map(change).collect(),
            names: self.names,
            urls: self.urls,
            wanted: self.wanted,
            current: Mutex::new(current),
        }
    }

    /// Whether the server behind `connection` is what the store needs: always with `any`; otherwise
    /// one round trip.
    pub(crate) async fn accepts(&self, connection: &mut PgConnection) -> Result<bool, sqlx::Error> {
        if self.wanted == Wanted::Any {
            return Ok(true);
        }
        let (in_recovery, read_only): (bool, String) =
            sqlx::query_as("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
                .fetch_one(connection)
                .await?;
        Ok(match self.wanted {
            Wanted::Any => true,
            Wanted::Primary => !in_recovery,
            Wanted::ReadWrite => !in_recovery && read_only == "off",
        })
    }

    /// Connects to the hosts in the URL's order and answers the first that is what the store needs,
    /// with its index and the connection (for the caller to use or close). Does not change the host in
    /// use ([`Targets::choose`] does).
    ///
    /// # Errors
    /// With one host and `any`, its connection error as sqlx gives it. Otherwise, when none will do: an
    /// [`sqlx::Error::Io`] (the store is unreachable, as during a failover before a standby is
    /// promoted) naming each host and why it was passed over.
    pub(crate) async fn select(&self) -> Result<(usize, PgConnection), sqlx::Error> {
        if !self.several() && self.wanted == Wanted::Any {
            let connection = self.hosts[0].connect().await?;
            return Ok((0, connection));
        }
        let mut why = Vec::with_capacity(self.hosts.len());
        for (index, options) in self.hosts.iter().enumerate() {
            match tokio::time::timeout(HOST_TIMEOUT, self.try_host(options)).await {
                Ok(Ok(Some(connection))) => return Ok((index, connection)),
                Ok(Ok(None)) => why.push(format!("{}: {}", self.names[index], self.refusal())),
                Ok(Err(error)) => why.push(format!("{}: {error}", self.names[index])),
                Err(_elapsed) => why.push(format!("{}: no answer within {HOST_TIMEOUT:?}", self.names[index])),
            }
        }
        Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!("no PostgreSQL host will do ({SESSION_ATTRS}={}): {}", self.wanted.name(), why.join("; ")),
        )))
    }

    /// A connection to the host of `options` if it is what the store needs, `None` if it is not.
    async fn try_host(&self, options: &PgConnectOptions) -> Result<Option<PgConnection>, sqlx::Error> {
        let mut connection = options.connect().await?;
        match self.accepts(&mut connection).await {
            Ok(true) => Ok(Some(connection)),
            Ok(false) => {
                close_quietly(connection).await;
                Ok(None)
            }
            Err(error) => {
                close_quietly(connection).await;
                Err(error)
            }
        }
    }

    /// Why a host that answered was passed over.
    fn refusal(&self) -> &'static str {
        match self.wanted {
            Wanted::Primary => "in recovery (a standby), not a primary",
            Wanted::ReadWrite | Wanted::Any => "read only (a standby, or default_transaction_read_only)",
        }
    }
}

impl Wanted {
    /// libpq's name for it.
    fn name(self) -> &'static str {
        match self {
            Wanted::Any => "any",
            Wanted::ReadWrite => "read-write",
            Wanted::Primary => "primary",
        }
    }
}

/// Closes a connection that is not needed, logging (not failing) when that cannot be done cleanly.
pub(crate) async fn close_quietly(connection: PgConnection) {
    if let Err(error) = connection.close().await {
        tracing::debug!(%error, "cannot close a PostgreSQL connection cleanly");
    }
}

/// The hosts of an authority's host part: split at commas outside `[…]` (an IPv6 address).
fn split_hosts(hosts: &str) -> Vec<&str> {
    let mut list = Vec::new();
    let (mut depth, mut start) = (0_i32, 0);
    for (at, character) in hosts.char_indices() {
        match character {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                list.push(&hosts[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    list.push(&hosts[start..]);
    list
}

/// `tail` (`/DB?a=1&b=2#f`) without parameter `name`, and that parameter's value (percent-decoding
/// is not needed for libpq's values).
fn take_parameter(tail: &str, name: &str) -> (String, Option<String>) {
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (tail, None),
    };
    let Some((path, query)) = before_fragment.split_once('?') else { return (tail.to_owned(), None) };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((key, found)) if key == name => {
                value = Some(found.to_owned());
                false
            }
            _ => !pair.is_empty(),
        })
        .collect();
    let mut rebuilt = path.to_owned();
    if !kept.is_empty() {
        rebuilt.push('?');
        rebuilt.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        rebuilt.push('#');
        rebuilt.push_str(fragment);
    }
    (rebuilt, value)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn hosts(targets: &Targets) -> Vec<String> {
        (0..targets.hosts.len()).map(|i| targets.name(i).to_owned()).collect()
    }

    #[test]
    fn one_host_is_what_sqlx_reads_and_wants_any_server() {
        let targets = Targets::parse("postgres://app:pw@db.example:6543/tollgate?sslmode=disable")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!targets.several());
        assert_eq!(hosts(&targets), ["db.example:6543"]);
        assert_eq!(targets.wanted, Wanted::Any);
        assert_eq!(targets.current().get_database(), Some("tollgate"));
        assert_eq!(targets.current().get_username(), "app");
    }

    #[test]
    fn several_hosts_keep_their_order_ports_and_the_rest_of_the_url() {
        let url = "postgresql://app:s3cr%40t@pg1:5433,pg2,[::1]:5435/tollgate?application_name=x&sslmode=disable";
        let targets = Targets::parse(url).unwrap_or_else(|e| panic!("{e}"));
        assert!(targets.several());
        assert_eq!(hosts(&targets), ["pg1:5433", "pg2:5432", "[::1]:5435"]);
        // With several hosts and nothing said, the store looks for a server it can write to.
        assert_eq!(targets.wanted, Wanted::ReadWrite);
        for index in 0..3 {
            targets.choose(index);
            let options = targets.current();
            assert_eq!(options.get_database(), Some("tollgate"));
            assert_eq!(options.get_username(), "app");
        }
        targets.choose(7);
        assert_eq!(targets.current_index(), 2, "an index past the end is the last host");
        let shown = format!("{targets:?}");
        assert!(shown.contains("pg1:5433") && !shown.contains("s3cr"), "{shown}");
    }

    #[test]
    fn target_session_attrs_is_read_and_taken_out() {
        for (value, wanted) in [("any", Wanted::Any), ("read-write", Wanted::ReadWrite), ("primary", Wanted::Primary)] {
            let url = format!("postgres://u@a,b/db?sslmode=disable&{SESSION_ATTRS}={value}#x");
            assert_eq!(Targets::parse(&url).unwrap_or_else(|e| panic!("{e}")).wanted, wanted, "{value}");
        }
        // One host may ask for a writable server too.
        let one =
            Targets::parse(&format!("postgres://u@a/db?{SESSION_ATTRS}=read-write")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(one.wanted, Wanted::ReadWrite);
        assert_eq!(
            take_parameter(&format!("/db?sslmode=disable&{SESSION_ATTRS}=any&x=1#f"), SESSION_ATTRS),
            ("/db?sslmode=disable&x=1#f".to_owned(), Some("any".to_owned()))
        );
        assert_eq!(
            take_parameter(&format!("/db?{SESSION_ATTRS}=any"), SESSION_ATTRS),
            ("/db".to_owned(), Some("any".to_owned()))
        );
        assert_eq!(take_parameter("/db", SESSION_ATTRS), ("/db".to_owned(), None));
    }

    #[test]
    fn values_a_writing_store_cannot_use_are_refused_by_name() {
        for value in ["read-only", "standby", "prefer-standby"] {
            let error = Targets::parse(&format!("postgres://u@a,b/db?{SESSION_ATTRS}={value}"))
                .err()
                .unwrap_or_else(|| panic!("refused"));
            assert!(error.to_string().contains("the store writes"), "{value}: {error}");
        }
        let error = Targets::parse(&format!("postgres://u@a/db?{SESSION_ATTRS}=sometimes"))
            .err()
            .unwrap_or_else(|| panic!("refused"));
        assert!(error.to_string().contains("sometimes"), "{error}");
        assert!(Targets::parse("postgres://u@a,,b/db").is_err(), "an empty host");
        assert!(Targets::parse("postgres://u@a:notaport,b/db").is_err());
        assert!(Targets::parse("pg1,pg2").is_err());
    }

    #[test]
    fn a_socket_directory_in_the_parameters_is_one_host() {
        let targets =
            Targets::parse("postgres://app@localhost/tollgate?host=/run/postgresql").unwrap_or_else(|e| panic!("{e}"));
        assert!(!targets.several());
        assert_eq!(targets.wanted, Wanted::Any);
        assert_eq!(targets.current().get_socket().map(|p| p.display().to_string()), Some("/run/postgresql".into()));
    }

    #[test]
    fn commas_inside_an_ipv6_address_do_not_split_it() {
        assert_eq!(split_hosts("[::1]:5432,h"), ["[::1]:5432", "h"]);
        assert_eq!(split_hosts("h"), ["h"]);
    }

    /// The test database's URL with its host list replaced by `hosts` (`{db}` stands for its own
    /// host:port), and `query` added; `None` (skip) without a test database.
    pub(crate) fn test_url(hosts: &str, query: &str) -> Option<String> {
        let url = tollgate_agent_testkit::postgres_url()?;
        let (scheme, rest) = url.split_once("://")?;
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, own) = match authority.rsplit_once('@') {
            Some((userinfo, own)) => (format!("{userinfo}@"), own),
            None => (String::new(), authority),
        };
        let separator = if tail.contains('?') { '&' } else { '?' };
        let query = if query.is_empty() { String::new() } else { format!("{separator}{query}") };
        Some(format!("{scheme}://{userinfo}{}{tail}{query}", hosts.replace("{db}", own)))
    }

    /// A host that does not answer is passed over for the next; with none that will do, the error
    /// names each host and why, and is one the store reports as unreachable (503, try again).
    #[tokio::test]
    async fn select_passes_over_hosts_that_will_not_do_and_names_them_all_when_none_will() {
        let Some(url) = test_url("127.0.0.1:1,{db}", "") else { return };
        let targets = Targets::parse(&url).unwrap_or_else(|e| panic!("{e}"));
        let (index, connection) = targets.select().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(index, 1, "the refused host is passed over");
        connection.close().await.unwrap_or_else(|e| panic!("{e}"));

        let Some(url) = test_url("127.0.0.1:1,127.0.0.1:2", "") else { return };
        let error = Targets::parse(&url).unwrap_or_else(|e| panic!("{e}")).select().await.err();
        let error = error.unwrap_or_else(|| panic!("no host answers"));
        let text = error.to_string();
        assert!(text.contains("127.0.0.1:1") && text.contains("127.0.0.1:2") && text.contains("read-write"), "{text}");
        let secrets = crate::codec::Secrets::from_url(&url);
        let reported = crate::codec::database_error(&secrets, "cannot connect to PostgreSQL", &error);
        assert!(matches!(reported, tollgate_agent_core::store::StoreError::Unreachable(_)), "{reported:?}");
    }

    /// `host_url` answers the URL of the one host that will do, without the others and without
    /// `target_session_attrs`; with none, the store's unreachable error.
    #[tokio::test]
    async fn host_url_names_the_host_that_will_do_alone() {
        let Some(url) = test_url("127.0.0.1:1,{db}", &format!("{SESSION_ATTRS}=read-write")) else { return };
        let Some(alone) = test_url("{db}", "") else { return };
        assert_eq!(crate::postgres::host_url(&url).await.unwrap_or_else(|e| panic!("{e}")), alone);
        assert_eq!(crate::postgres::host_url(&alone).await.unwrap_or_else(|e| panic!("{e}")), alone);
        let Some(url) = test_url("127.0.0.1:1,127.0.0.1:2", "") else { return };
        let error = crate::postgres::host_url(&url).await.err();
        assert!(matches!(error, Some(tollgate_agent_core::store::StoreError::Unreachable(_))), "{error:?}");
    }

    /// A server whose sessions are read only does not do for `read-write` (a standby, or one set
    /// read only by its operator), does for `primary` (not in recovery) and for `any`; with several
    /// hosts none of them then will do for `read-write`.
    #[tokio::test]
    async fn read_write_passes_over_a_read_only_server() {
        let read_only = "options=-c%20default_transaction_read_only%3Don";
        for (attrs, accepted) in [("read-write", false), ("primary", true), ("any", true)] {
            let Some(url) = test_url("{db}", &format!("{read_only}&{SESSION_ATTRS}={attrs}")) else { return };
            let targets = Targets::parse(&url).unwrap_or_else(|e| panic!("{e}"));
            let mut connection = targets.current().connect().await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(targets.accepts(&mut connection).await.unwrap_or_else(|e| panic!("{e}")), accepted, "{attrs}");
            connection.close().await.unwrap_or_else(|e| panic!("{e}"));
        }
        let Some(url) = test_url("127.0.0.1:1,{db}", read_only) else { return };
        let error = Targets::parse(&url).unwrap_or_else(|e| panic!("{e}")).select().await.err();
        let text = error.unwrap_or_else(|| panic!("a read-only server does not do")).to_string();
        assert!(text.contains("read only"), "{text}");
    }
}
