//! An authoritative DNS server on loopback for tests.
//!
//! [`DnsFixture::start`] runs hickory-server's catalog with one in-memory
//! zone for the root (`.`), so it answers authoritatively for every name,
//! on `127.0.0.1` with one random port for both UDP and TCP, on a thread
//! with its own runtime. Records are set and removed while it runs; a name
//! can be made to fail ([`Fault::ServFail`]) or to go unanswered
//! ([`Fault::NoAnswer`], the client times out). Every query it receives is
//! logged ([`DnsFixture::queries`]).
//!
//! ```no_run
//! use dns_fixture::{DnsFixture, Fault, Record};
//! let dns = DnsFixture::start().unwrap();
//! dns.set("track.shop.example", [Record::cname("ingress.provider.example")]);
//! dns.set("_challenge.track.shop.example", [Record::txt("v=1 abc")]);
//! dns.fault("broken.example", Fault::ServFail);
//! let nameserver = dns.addr(); // UDP and TCP
//! ```
//!
//! Names are case-insensitive and may end with a dot; the records at a
//! name are replaced as a whole by [`DnsFixture::set`].

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::Duration;

use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::{Header, HeaderCounts, MessageType, Metadata, ResponseCode};
use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, MX, SOA, TXT};
use hickory_server::proto::rr::{LowerName, Name, RData, RecordSet, RecordType, RrKey};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, MessageResponseBuilder, ZoneType};
use tokio::sync::oneshot;

/// Time to live of every record the fixture serves (resolvers in tests
/// should not cache across changes anyway).
pub const TTL: u32 = 1;

/// One record's data, for [`DnsFixture::set`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    /// An alias: the only record its name may have.
    Cname(String),
    /// One TXT record made of one or more character strings (each at most
    /// 255 bytes on the wire; a reader joins them).
    Txt(Vec<String>),
    Mx {
        preference: u16,
        exchange: String,
    },
}

impl Record {
    pub fn a(ip: impl Into<Ipv4Addr>) -> Self {
        Record::A(ip.into())
    }

    pub fn aaaa(ip: impl Into<Ipv6Addr>) -> Self {
        Record::Aaaa(ip.into())
    }

    pub fn cname(target: impl Into<String>) -> Self {
        Record::Cname(target.into())
    }

    /// A TXT record of one character string.
    pub fn txt(value: impl Into<String>) -> Self {
        Record::Txt(vec![value.into()])
    }

    /// A TXT record of several character strings.
    pub fn txt_strings<S: Into<String>>(strings: impl IntoIterator<Item = S>) -> Self {
        Record::Txt(strings.into_iter().map(Into::into).collect())
    }

    pub fn mx(preference: u16, exchange: impl Into<String>) -> Self {
        Record::Mx {
            preference,
            exchange: exchange.into(),
        }
    }

    fn record_type(&self) -> RecordType {
        match self {
            Record::A(_) => RecordType::A,
            Record::Aaaa(_) => RecordType::AAAA,
            Record::Cname(_) => RecordType::CNAME,
            Record::Txt(_) => RecordType::TXT,
            Record::Mx { .. } => RecordType::MX,
        }
    }

    fn rdata(&self) -> RData {
        match self {
            Record::A(ip) => RData::A(A(*ip)),
            Record::Aaaa(ip) => RData::AAAA(AAAA(*ip)),
            Record::Cname(target) => RData::CNAME(CNAME(name(target))),
            Record::Txt(strings) => RData::TXT(TXT::new(strings.clone())),
            Record::Mx {
                preference,
                exchange,
            } => RData::MX(MX::new(*preference, name(exchange))),
        }
    }
}

/// How the fixture misbehaves for one name (every record type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer `SERVFAIL`.
    ServFail,
    /// Send nothing back: the client waits until its timeout.
    NoAnswer,
}

/// A query the fixture received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenQuery {
    /// The name as asked, lower-cased, with its final dot.
    pub name: String,
    /// `A`, `TXT`, `CNAME`, ….
    pub record_type: String,
    /// `udp` or `tcp`.
    pub protocol: String,
}

/// An absolute DNS name from text: case-insensitive, final dot optional.
/// Panics on a name DNS cannot carry (the fixture is for tests).
fn name(text: &str) -> Name {
    let mut name =
        Name::from_str(text).unwrap_or_else(|e| panic!("`{text}` is not a DNS name: {e}"));
    name.set_fqdn(true);
    name
}

fn lower(text: &str) -> LowerName {
    LowerName::new(&name(text))
}

#[derive(Default)]
struct Shared {
    faults: Mutex<HashMap<LowerName, Fault>>,
    queries: Mutex<Vec<SeenQuery>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The request handler: faults first, then hickory's catalog.
struct Handler {
    catalog: Catalog,
    shared: Arc<Shared>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let fault = match request.request_info() {
            Ok(info) => {
                let name = info.query.name().clone();
                lock(&self.shared.queries).push(SeenQuery {
                    name: name.to_string().to_ascii_lowercase(),
                    record_type: info.query.query_type().to_string(),
                    protocol: match info.protocol {
                        Protocol::Tcp => "tcp".into(),
                        other => other.to_string().to_ascii_lowercase(),
                    },
                });
                lock(&self.shared.faults).get(&name).copied()
            }
            Err(_) => None,
        };
        match fault {
            None => {
                self.catalog
                    .handle_request::<R, T>(request, response_handle)
                    .await
            }
            Some(Fault::NoAnswer) => failed(request),
            Some(Fault::ServFail) => {
                let response = MessageResponseBuilder::new(&request.queries, None)
                    .error_msg(&request.metadata, ResponseCode::ServFail);
                response_handle
                    .send_response(response)
                    .await
                    .unwrap_or_else(|_| failed(request))
            }
        }
    }
}

/// What the server is told about a request it did not answer.
fn failed(request: &Request) -> ResponseInfo {
    let mut metadata = Metadata::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    metadata.response_code = ResponseCode::ServFail;
    ResponseInfo::from(Header {
        metadata,
        counts: HeaderCounts::default(),
    })
}

/// A running authoritative server on `127.0.0.1`. Dropping it stops it.
pub struct DnsFixture {
    addr: SocketAddr,
    zone: Arc<InMemoryZoneHandler>,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl DnsFixture {
    /// Starts a server on `127.0.0.1`, UDP and TCP on the same free port.
    pub fn start() -> io::Result<Self> {
        let (udp, tcp) = bind_pair()?;
        let addr = udp.local_addr()?;
        let zone = Arc::new(root_zone()?);
        let shared = Arc::new(Shared::default());
        let mut catalog = Catalog::new();
        catalog.upsert(LowerName::new(&Name::root()), vec![zone.clone()]);
        let handler = Handler {
            catalog,
            shared: shared.clone(),
        };

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready, started) = mpsc::channel::<io::Result<()>>();
        let thread = thread::Builder::new()
            .name("dns-fixture".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let sockets = tokio::net::UdpSocket::from_std(udp)
                        .and_then(|udp| Ok((udp, tokio::net::TcpListener::from_std(tcp)?)));
                    let (udp, tcp) = match sockets {
                        Ok(sockets) => sockets,
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    let mut server = Server::new(handler);
                    server.register_socket(udp);
                    server.register_listener(tcp, Duration::from_secs(5), 64 * 1024);
                    let _ = ready.send(Ok(()));
                    let _ = stopped.await;
                    let _ = server.shutdown_gracefully().await;
                });
            })?;
        started
            .recv()
            .map_err(|_| io::Error::other("the DNS fixture's thread ended at start"))??;
        Ok(Self {
            addr,
            zone,
            shared,
            runtime: handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens, for UDP and TCP alike.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes `records` the only records at `name` (an empty list removes
    /// them all). A CNAME must be alone at its name.
    pub fn set(&self, name_text: &str, records: impl IntoIterator<Item = Record>) {
        let records: Vec<Record> = records.into_iter().collect();
        assert!(
            !records.iter().any(|r| matches!(r, Record::Cname(_))) || records.len() == 1,
            "a CNAME must be the only record at {name_text}"
        );
        let owner = name(name_text);
        let mut sets: BTreeMap<RecordType, RecordSet> = BTreeMap::new();
        for record in &records {
            let set = sets
                .entry(record.record_type())
                .or_insert_with(|| RecordSet::with_ttl(owner.clone(), record.record_type(), TTL));
            set.add_rdata(record.rdata());
        }
        let key_name = LowerName::new(&owner);
        self.with_records(move |map| {
            map.retain(|key, _| key.name() != &key_name);
            for (record_type, set) in sets {
                map.insert(RrKey::new(key_name.clone(), record_type), Arc::new(set));
            }
        });
    }

    /// Removes every record at `name`.
    pub fn remove(&self, name_text: &str) {
        self.set(name_text, []);
    }

    /// Makes every query for `name` fail this way (until cleared).
    pub fn fault(&self, name_text: &str, fault: Fault) {
        lock(&self.shared.faults).insert(lower(name_text), fault);
    }

    /// Answers queries for `name` normally again.
    pub fn clear_fault(&self, name_text: &str) {
        lock(&self.shared.faults).remove(&lower(name_text));
    }

    /// Every query received so far, oldest first.
    pub fn queries(&self) -> Vec<SeenQuery> {
        lock(&self.shared.queries).clone()
    }

    /// Changes the zone's records on the server's own runtime and waits
    /// until it is done (callable from any thread, inside a runtime or not).
    fn with_records(
        &self,
        change: impl FnOnce(&mut BTreeMap<RrKey, Arc<RecordSet>>) + Send + 'static,
    ) {
        let zone = self.zone.clone();
        let (done, finished) = mpsc::channel();
        self.runtime.spawn(async move {
            let mut records = zone.records_mut().await;
            change(&mut records);
            let _ = done.send(());
        });
        finished
            .recv()
            .expect("the DNS fixture's runtime stopped while changing records");
    }
}

impl Drop for DnsFixture {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A UDP socket and a TCP listener on the same free loopback port.
fn bind_pair() -> io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let mut last = None;
    for _ in 0..20 {
        let udp = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        match std::net::TcpListener::bind(udp.local_addr()?) {
            Ok(tcp) => {
                udp.set_nonblocking(true)?;
                tcp.set_nonblocking(true)?;
                return Ok((udp, tcp));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free port for UDP and TCP")))
}

/// The root zone with only its SOA: authoritative for every name.
fn root_zone() -> io::Result<InMemoryZoneHandler> {
    let origin = Name::root();
    let soa = SOA::new(
        name("ns.fixture.test"),
        name("hostmaster.fixture.test"),
        1,
        3600,
        600,
        86400,
        TTL,
    );
    let mut set = RecordSet::with_ttl(origin.clone(), RecordType::SOA, TTL);
    set.add_rdata(RData::SOA(soa));
    let mut records = BTreeMap::new();
    records.insert(RrKey::new(LowerName::new(&origin), RecordType::SOA), set);
    InMemoryZoneHandler::new(origin, records, ZoneType::Primary, AxfrPolicy::Deny)
        .map_err(io::Error::other)
}
