//! `jepsen fuzz`: a differential fuzzer against real etcd 3.5.1. One single-member server of each kind
//! runs on loopback; random requests built from the protobuf descriptors go to both, in the same order,
//! as the same bytes, and their answers (gRPC code and message) are compared. Both stores start empty and
//! take the same requests, so they stay in step unless an answer already differed.
//!
//! Each seed runs once with auth off and once with auth on (`--auth`), each on fresh servers. A crash of
//! ours ends the seed and fails the run; a crash of etcd is recorded and etcd restarted empty. Requests
//! known to crash etcd 3.5.1 are not sent to it: its answer comes from [`known`].
//!
//! - [`options`]: the flags; [`server`]: the child processes.
//! - [`catalog`]: the methods, from the descriptors; [`names`]: the small key, lease, user and role
//!   universes; [`value`]: edge values; [`generate`]: seeded requests; [`request`]: one request, its wire
//!   bytes and its JSON.
//! - [`call`]: raw unary and stream calls and their [`call::Answer`]; [`field`]: a request's fields;
//!   [`known`]: etcd's answers for the requests etcd 3.5.1 cannot take (or should not: 3.6 refuses them);
//!   [`etcd36`]: etcd 3.6's answers where they differ from 3.5.1's; [`guard`], [`txn_permission`],
//!   [`probe`], [`hardening`]: 3.6.14's added auth checks (those of a Txn apart), what etcd is asked to
//!   evaluate them, and their verdict; [`rule`]: the 3.6 rules by name, as counted; [`auth`]: the auth-on
//!   setup and each server's tokens.
//! - [`alarm`]: raised alarms cleared again after a few requests; [`compare`]: when two answers are the
//!   same; [`report`]: classes, table, `fuzz.json`.

pub mod alarm;
pub mod auth;
pub mod call;
pub mod catalog;
pub mod compare;
pub mod etcd36;
pub mod field;
pub mod generate;
pub mod guard;
pub mod hardening;
pub mod known;
pub mod names;
pub mod options;
pub mod probe;
pub mod report;
pub mod request;
pub mod rule;
pub mod server;
pub mod txn_permission;
pub mod value;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tracing::{info, warn};

use self::auth::Tokens;
use self::call::{Answer, Call};
use self::catalog::{Catalog, Shape};
use self::compare::{Drift, Verdict};
use self::etcd36::WatchChange;
use self::generate::Generator;
use self::hardening::Context;
use self::known::Known;
use self::options::FuzzOptions;
use self::probe::Probe;
use self::report::{Crash, Report, RunTotals, Seen};
use self::request::{Caller, Request};
use self::rule::Rule36;
use self::server::{Binaries, Server, Side};
use crate::error::{Error, Result};

/// How long a server that answered like a dropped connection may take to finish dying.
const CRASH_GRACE: Duration = Duration::from_secs(2);
/// What both servers answer for a token they do not know (or no longer know).
const INVALID_TOKEN: &str = "invalid auth token";
/// After etcd's answer in a difference: it comes from [`known`], etcd 3.5.1 crashing on the request.
const FROM_TABLE: &str = " [from the table]";
/// After etcd's answer in a difference: it is etcd 3.6's, not 3.5.1's ([`etcd36`], [`known`]).
const AS_ETCD36: &str = " [as etcd 3.6]";
/// After etcd's answer in a difference: etcd was sent the request without its token (auth off).
const TOKEN_IGNORED: &str = " [token left off, as etcd 3.6]";
/// How many lines of a crashed server's log go into the report.
const LOG_TAIL_LINES: usize = 40;

/// What a fuzzing run produced.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    /// The table, as printed.
    pub table: String,
    /// Differences were found, or ours crashed.
    pub failed: bool,
}

/// Runs every seed and auth mode, then writes `fuzz.json` and `fuzz.txt` into the output folder.
pub async fn run(opts: FuzzOptions) -> Result<Outcome> {
    let catalog = Catalog::load()?;
    let binaries = Binaries::find(&opts)?;
    let dir = create_dir(&opts)?;
    info!(dir = %dir.display(), "fuzz output folder");
    let started = Instant::now();
    let mut report = Report::default();
    for seed in opts.seed_list() {
        for auth in opts.auth.sessions() {
            let root = dir.join(format!("seed{seed}-auth-{}", if auth { "on" } else { "off" }));
            let mut session = Session::start(&opts, &catalog, &binaries, seed, auth, &root).await?;
            let totals = session.run(&mut report).await?;
            let ours_crashed = totals.ours_crashed;
            report.add_run(totals);
            if ours_crashed {
                // The rest of this seed would start from a store that no longer matches etcd's.
                break;
            }
        }
    }
    let json = report.to_json(&opts, started.elapsed().as_secs_f64());
    let text = serde_json::to_string_pretty(&json).map_err(Error::Encode)?;
    write(&dir.join("fuzz.json"), &text)?;
    let table = report.render();
    write(&dir.join("fuzz.txt"), &table)?;
    Ok(Outcome { dir, table, failed: report.differences() > 0 || report.ours_crashed() })
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(Error::system(format!("write {}", path.display())))
}

/// `--out`, or a new `jepsen-fuzz-<unix time>` in the temp dir.
fn create_dir(opts: &FuzzOptions) -> Result<PathBuf> {
    let dir = opts.out.clone().unwrap_or_else(|| {
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        std::env::temp_dir().join(format!("jepsen-fuzz-{stamp}"))
    });
    std::fs::create_dir_all(&dir).map_err(Error::system(format!("create {}", dir.display())))?;
    Ok(dir)
}

/// One seed in one auth mode, on fresh servers.
struct Session<'a> {
    opts: &'a FuzzOptions,
    catalog: &'a Catalog,
    generator: Generator,
    ours: Option<Server>,
    etcd: Option<Server>,
    tokens: Tokens,
    /// The auth setup's requests, replayed on a restarted etcd.
    setup: Vec<Request>,
    drift: Drift,
    /// Whether etcd has auth on, as its answers tell.
    etcd_auth: bool,
    totals: RunTotals,
    previous: Option<Request>,
    /// Requests clearing raised alarms, each with the request number before which it is sent.
    alarm_clears: Vec<(u64, Request)>,
}

impl<'a> Session<'a> {
    async fn start(
        opts: &'a FuzzOptions,
        catalog: &'a Catalog,
        binaries: &Binaries,
        seed: u64,
        auth: bool,
        root: &Path,
    ) -> Result<Session<'a>> {
        let (ours, etcd) = tokio::join!(binaries.start(Side::Ours, root), binaries.start(Side::Etcd, root));
        let (ours, etcd) = (ours?, etcd?);
        info!(seed, auth, "servers ready");
        Ok(Session {
            opts,
            catalog,
            generator: Generator::new(catalog, seed, auth),
            ours,
            etcd,
            tokens: Tokens::default(),
            setup: Vec::new(),
            drift: Drift::default(),
            etcd_auth: false,
            totals: RunTotals { seed, auth, ..RunTotals::default() },
            previous: None,
            alarm_clears: Vec::new(),
        })
    }

    async fn run(&mut self, report: &mut Report) -> Result<RunTotals> {
        let started = Instant::now();
        let mut alive = !self.totals.auth || self.enable_auth(report).await?;
        let mut index = 0;
        while alive && index < self.opts.requests {
            index += 1;
            self.clear_alarms(index).await;
            let request = self.generator.next_request();
            alive = self.step(&request, index, &request.method.label(), report).await?;
            if let Some(clear) = alarm::clearing(&request) {
                self.alarm_clears.push((index + alarm::HOLD, clear));
            }
            self.previous = Some(request);
            if index % 1000 == 0 {
                info!(
                    seed = self.totals.seed,
                    auth = self.totals.auth,
                    index,
                    differences = self.totals.differences,
                    "fuzzing"
                );
            }
        }
        for server in self.ours.iter_mut().chain(self.etcd.iter_mut()) {
            server.stop();
        }
        self.totals.secs = started.elapsed().as_secs_f64();
        Ok(self.totals.clone())
    }

    /// Runs the auth setup on both servers (compared like any request), then authenticates every user
    /// on each. `false` when ours crashed.
    async fn enable_auth(&mut self, report: &mut Report) -> Result<bool> {
        self.setup = auth::setup_requests(self.catalog, self.generator.rng())?;
        for request in self.setup.clone() {
            let label = format!("{} (setup)", request.method.label());
            if !self.step(&request, 0, &label, report).await? {
                return Ok(false);
            }
        }
        self.log_in_again().await;
        self.totals.ours_tokens = self.tokens.count(Side::Ours);
        self.totals.etcd_tokens = self.tokens.count(Side::Etcd);
        Ok(true)
    }

    /// Sends the alarm clearings due before request `index` to both servers; their answers are not
    /// compared (the Alarm request that raised the alarm was).
    async fn clear_alarms(&mut self, index: u64) {
        let due: Vec<Request> =
            self.alarm_clears.iter().filter(|(at, _)| *at <= index).map(|(_, r)| r.clone()).collect();
        if due.is_empty() {
            return;
        }
        self.alarm_clears.retain(|(at, _)| *at > index);
        let timeout = self.opts.timeout();
        for request in &due {
            let body = request.encode();
            let _ = tokio::join!(
                self.ask(Side::Etcd, request, body.clone(), timeout),
                self.ask(Side::Ours, request, body, timeout)
            );
        }
        self.drift.reset();
    }

    /// Logs every user in on both servers, replacing their tokens. Also done again after a token stopped
    /// working on one side only (etcd drops a user's tokens when the password changes): every later
    /// request of that user would differ for that one reason.
    async fn log_in_again(&mut self) {
        let timeout = self.opts.timeout();
        for (side, server) in [(Side::Ours, &self.ours), (Side::Etcd, &self.etcd)] {
            if let Some(server) = server {
                self.tokens.authenticate(side, server.channel(), timeout).await;
            }
        }
    }

    /// Sends one request to both servers and records what differs. `false` when ours crashed.
    async fn step(&mut self, request: &Request, index: u64, label: &str, report: &mut Report) -> Result<bool> {
        let body = request.encode();
        let timeout =
            if request.method.shape == Shape::Unary { self.opts.timeout() } else { self.opts.stream_timeout() };
        let held_back = self.hold_back(request, &body).await;
        let token_ignored = etcd36::ignores_token(self.etcd_auth, self.tokens.token(Side::Etcd, request.caller));
        let this = &*self;
        let etcd_future = async {
            match &held_back {
                Some(Known::AnswerToday(answer) | Known::AnswerAs36(answer, _)) => Some(answer.clone()),
                Some(Known::NoAnswer(_)) => None,
                None => this.ask(Side::Etcd, request, body.clone(), timeout).await,
            }
        };
        let ours_future = this.ask(Side::Ours, request, body.clone(), timeout);
        let sent = Instant::now();
        let (etcd_answer, ours_answer) = tokio::join!(etcd_future, ours_future);
        tracing::debug!(
            index,
            method = label,
            ms = u64::try_from(sent.elapsed().as_millis()).unwrap_or(u64::MAX),
            request = %request.readable(),
            etcd = ?etcd_answer,
            ours = ?ours_answer,
            "answered"
        );
        let seen = Seen { seed: self.totals.seed, auth: self.totals.auth, index };
        self.count(held_back.as_ref(), token_ignored, etcd_answer.as_ref(), ours_answer.as_ref());

        if let Some(answer) = &ours_answer {
            if self.died(Side::Ours, answer).await {
                warn!(seed = seen.seed, index, method = label, "ours crashed");
                self.record_crash(Side::Ours, seen, label, answer, request, report);
                self.totals.ours_crashed = true;
                return Ok(false);
            }
        }
        if let (Some(answer), None) = (&etcd_answer, &held_back) {
            if self.died(Side::Etcd, answer).await {
                warn!(seed = seen.seed, index, method = label, "etcd crashed; restarting it empty");
                self.record_crash(Side::Etcd, seen, label, answer, request, report);
                self.restart_etcd(report).await?;
                return Ok(true);
            }
            self.follow_etcd_auth(request, answer);
        }
        if let (Some(Known::NoAnswer(reason)), Some(ours)) = (&held_back, &ours_answer) {
            self.drift.reset();
            report.add_uncompared(label, reason, compare::describe(ours), request, seen);
        }
        let mut source = match &held_back {
            Some(Known::AnswerToday(_)) => FROM_TABLE,
            Some(Known::AnswerAs36(..)) => AS_ETCD36,
            _ if token_ignored => TOKEN_IGNORED,
            _ => "",
        };
        let etcd_answer = match (etcd_answer, &held_back) {
            (Some(answer), None) => match self.answer_as_36(request, &answer).await {
                Some(translated) => {
                    source = AS_ETCD36;
                    Some(translated)
                }
                None => Some(answer),
            },
            (answer, _) => answer,
        };
        if let (Some(etcd), Some(ours)) = (etcd_answer, ours_answer) {
            if held_back.is_some() {
                // etcd's store did not see this request: its revision is no guide for the next one.
                self.drift.reset();
            }
            if let Verdict::Differ { etcd: mut etcd_text, ours: ours_text } =
                compare::compare(&etcd, &ours, &mut self.drift)
            {
                etcd_text.push_str(source);
                let token_trouble = etcd_text.contains(INVALID_TOKEN) != ours_text.contains(INVALID_TOKEN);
                self.totals.differences += 1;
                report.add_difference(label, etcd_text, ours_text, request, seen);
                if token_trouble && matches!(request.caller, Caller::User(_)) {
                    self.log_in_again().await;
                }
            }
        }
        Ok(true)
    }

    /// Whether the request is held back from etcd, and what stands in for its answer: etcd 3.5.1 crashes
    /// on it, or 3.6 refuses what 3.5.1 would take: an auth check 3.6.14 added ([`hardening`]), a grant
    /// that got past the checks before (see [`known`]).
    async fn hold_back(&self, request: &Request, body: &Bytes) -> Option<Known> {
        let etcd = self.etcd.as_ref()?;
        let crash = if self.opts.send_known_crashes { None } else { known::known(request, body.len()) };
        // The handler's checks (the sort options) come before any auth check; the crash on an Alarm after
        // the admin check, which 3.6 runs first.
        if let Some(Known::AnswerToday(_)) = crash {
            return crash;
        }
        if self.etcd_auth {
            let token = self.token(Side::Etcd, request.caller);
            let cx = Context {
                probe: Probe { channel: etcd.channel(), timeout: self.opts.timeout() },
                credential: etcd36::Credential::of(request.caller, token),
                token,
                // USERS[0] is root.
                root: self.tokens.token(Side::Etcd, Caller::User(0)),
                garbage: self.tokens.token(Side::Etcd, Caller::Garbage),
            };
            if let Some((answer, rule)) = hardening::held_back(request, body, &cx).await {
                return Some(Known::AnswerAs36(answer, rule));
            }
        }
        if crash.is_some() {
            return crash;
        }
        let probe = known::grant_probe(request, body.len())?;
        let answer = self.ask(Side::Etcd, &probe, probe.encode(), self.opts.timeout()).await?;
        tracing::debug!(request = %probe.readable(), answer = ?answer, "grant probe");
        known::grant_refusal(&answer)
    }

    /// etcd 3.5.1's answer turned into 3.6's where they differ (a Watch create, an admin-only maintenance
    /// request refused), counted.
    async fn answer_as_36(&mut self, request: &Request, answer: &Answer) -> Option<Answer> {
        if self.etcd_auth {
            if let Some(mapped) = hardening::mapped(request, answer) {
                self.totals.as_etcd36.add(Rule36::AdminMapped);
                return Some(mapped);
            }
        }
        self.watch_as_36(request, answer).await
    }

    /// etcd 3.5.1's answer to a Watch create turned into 3.6's where they differ ([`etcd36`]), counted. A
    /// watch etcd opened and 3.6 would refuse does not stay: [`call::send`] cancels a stream after its first
    /// response.
    async fn watch_as_36(&mut self, request: &Request, answer: &Answer) -> Option<Answer> {
        let create = etcd36::WatchCreate::of(request)?;
        let auth_caller = self.etcd_auth.then_some(request.caller);
        let translated = match etcd36::watch_change(&create, answer, auth_caller)? {
            WatchChange::NegativeStart(translated) => {
                self.totals.as_etcd36.watch_negative_start += 1;
                translated
            }
            WatchChange::RefusedForAuth => {
                let token = self.token(Side::Etcd, request.caller);
                let credential = etcd36::Credential::of(request.caller, token);
                let channel = self.etcd.as_ref()?.channel();
                let reason = etcd36::refusal_reason(&create, credential, channel, token, self.opts.timeout()).await?;
                self.totals.as_etcd36.watch_refused += 1;
                create.canceled(&reason)
            }
            WatchChange::FromKey => {
                let token = self.token(Side::Etcd, request.caller);
                let channel = self.etcd.as_ref()?.channel();
                let reason = etcd36::from_key_reason(&create, channel, token, self.opts.timeout()).await?;
                self.totals.as_etcd36.watch_from_key += 1;
                create.canceled(&reason)
            }
        };
        Some(translated)
    }

    /// Follows whether etcd has auth on, from its OK answers to AuthEnable and AuthDisable (a session with
    /// auth off may turn it on, one with auth on may turn it off).
    fn follow_etcd_auth(&mut self, request: &Request, answer: &Answer) {
        if answer.is_ok() {
            match request.method.name.as_str() {
                "AuthEnable" => self.etcd_auth = true,
                "AuthDisable" => self.etcd_auth = false,
                _ => {}
            }
        }
    }

    /// The token `caller` sends to `side`: none to etcd while its auth is off, as 3.6 reads none then.
    fn token(&self, side: Side, caller: Caller) -> Option<&str> {
        let token = self.tokens.token(side, caller);
        if side == Side::Etcd && etcd36::ignores_token(self.etcd_auth, token) {
            None
        } else {
            token
        }
    }

    /// `side`'s answer to the request; `None` when that side does not run.
    async fn ask(&self, side: Side, request: &Request, body: Bytes, timeout: Duration) -> Option<Answer> {
        let server = match side {
            Side::Ours => self.ours.as_ref(),
            Side::Etcd => self.etcd.as_ref(),
        }?;
        let path = request.method.path();
        let token = self.token(side, request.caller);
        let shape = request.method.shape;
        let requested_watch_id = request.requested_watch_id();
        let call = Call { channel: server.channel(), path: &path, shape, body, token, timeout, requested_watch_id };
        Some(call::send(call).await)
    }

    fn count(&mut self, held_back: Option<&Known>, token_ignored: bool, etcd: Option<&Answer>, ours: Option<&Answer>) {
        let totals = &mut self.totals;
        totals.requests += 1;
        match held_back {
            Some(Known::AnswerAs36(_, rule)) => totals.as_etcd36.add(*rule),
            Some(_) => totals.from_table += 1,
            None => totals.as_etcd36.token_ignored += u64::from(token_ignored),
        }
        let answered = |a: &Answer| !matches!(a, Answer::Timeout | Answer::Ended);
        if let Some(answer) = etcd.filter(|_| held_back.is_none()) {
            totals.etcd_answered += u64::from(answered(answer));
            totals.etcd_ok += u64::from(answer.is_ok());
        }
        if let Some(answer) = ours {
            totals.ours_answered += u64::from(answered(answer));
            totals.ours_ok += u64::from(answer.is_ok());
        }
    }

    /// Whether `side`'s process is gone: it has exited, or exits soon after an answer that looked like a
    /// dropped connection.
    async fn died(&mut self, side: Side, answer: &Answer) -> bool {
        let server = match side {
            Side::Ours => self.ours.as_mut(),
            Side::Etcd => self.etcd.as_mut(),
        };
        let Some(server) = server else { return false };
        !server.is_running() || (answer.may_be_a_crash() && server.exits_within(CRASH_GRACE).await)
    }

    fn record_crash(
        &self,
        side: Side,
        seen: Seen,
        label: &str,
        answer: &Answer,
        request: &Request,
        report: &mut Report,
    ) {
        let server = match side {
            Side::Ours => self.ours.as_ref(),
            Side::Etcd => self.etcd.as_ref(),
        };
        report.add_crash(Crash {
            side: side.name(),
            seen,
            method: label.to_string(),
            answer: compare::describe(answer),
            request: request.json(),
            request_readable: request.readable(),
            previous_request: self.previous.as_ref().map(Request::readable),
            log: server.map(|s| s.log_path().display().to_string()).unwrap_or_default(),
            log_tail: server.map(|s| s.log_tail(LOG_TAIL_LINES)).unwrap_or_default(),
        });
    }

    /// Starts etcd again, empty, and (auth on) replays the setup on it alone.
    async fn restart_etcd(&mut self, report: &mut Report) -> Result<()> {
        report.note(
            "etcd crashed and was restarted on an empty data dir: from then on the two stores differ, and \
             later differences of that session may come from that alone"
                .to_string(),
        );
        self.totals.etcd_crashes += 1;
        self.drift.reset();
        let Some(etcd) = self.etcd.as_mut() else { return Ok(()) };
        etcd.restart_fresh().await?;
        self.etcd_auth = false;
        if self.totals.auth {
            let timeout = self.opts.timeout();
            for request in self.setup.clone() {
                let Some(answer) = self.ask(Side::Etcd, &request, request.encode(), timeout).await else { continue };
                self.follow_etcd_auth(&request, &answer);
                if !answer.is_ok() {
                    warn!(method = %request.method.label(), answer = %compare::describe(&answer), "setup on the restarted etcd");
                }
            }
            if let Some(etcd) = &self.etcd {
                self.tokens.authenticate(Side::Etcd, etcd.channel(), timeout).await;
            }
        }
        Ok(())
    }
}
