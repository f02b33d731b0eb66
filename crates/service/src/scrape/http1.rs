//! A small HTTP/1.1 client for `GET /metrics`, with a pool of idle connections that cost only
//! their sockets.
//!
//! A general client keeps buffers with every idle connection: hyper holds a read buffer, a
//! write buffer and a request channel (about 35 KB), which at 5,000 pods is most of the scaler's
//! memory. A scrape is always the same exchange (one GET, one response, then the connection
//! waits about two seconds for the next scrape), so this client keeps nothing but the socket
//! between scrapes: the request is written from a few hundred bytes built per scrape and the
//! response is read through one buffer that lives only while the scrape does.
//!
//! What it speaks: HTTP/1.1 responses framed by `Content-Length`, `Transfer-Encoding: chunked`
//! or the end of the connection; informational (1xx) heads before the response are skipped.
//! A connection goes back to the pool only after a complete, well-framed response that did
//! not ask to close, with nothing after it. A reused connection that turns out to have been
//! closed by the target before any byte of the answer is retried once on a new connection
//! (a GET is safe to repeat). Every malformed or oversized head, chunk line or trailer is an
//! error whose text describes the problem, never the target's bytes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Largest response head (status line and headers) accepted; a vLLM head is under 300 bytes.
pub(super) const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Most headers accepted in a response head.
const MAX_HEADERS: usize = 64;

/// Largest chunk-size line (hex size and extensions) of a chunked body.
const MAX_CHUNK_LINE_BYTES: usize = 1024;

/// Largest trailer section of a chunked body.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// The size of each read from the socket.
const READ_BYTES: usize = 16 * 1024;

/// How often idle connections past their idle timeout are closed.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Why a request failed; the cause is for the scaler's debug log only.
#[derive(Debug)]
pub(super) struct Failure {
    /// No connection could be made (the next address of the target may be tried).
    pub(super) connect: bool,
    /// What happened, without any of the target's bytes.
    pub(super) cause: String,
}

impl Failure {
    fn connect(cause: String) -> Self {
        Self {
            connect: true,
            cause,
        }
    }

    fn transport(cause: impl Into<String>) -> Self {
        Self {
            connect: false,
            cause: cause.into(),
        }
    }
}

/// Opens connections, keeps idle ones per target address, and sends scrapes over them.
#[derive(Debug)]
pub(super) struct Client {
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle_per_target: usize,
    pool: Mutex<Pool>,
}

#[derive(Debug)]
struct Pool {
    idle: HashMap<SocketAddr, Vec<(TcpStream, Instant)>>,
    last_sweep: Instant,
}

impl Client {
    /// A client; `max_idle_per_target` 0 keeps no connection open between scrapes.
    pub(super) fn new(
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_idle_per_target: usize,
    ) -> Self {
        Self {
            connect_timeout,
            idle_timeout,
            max_idle_per_target,
            pool: Mutex::new(Pool {
                idle: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }

    /// Idle connections kept right now (for tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        pool.idle.values().map(Vec::len).sum()
    }

    /// Sends `request` (a complete request head) to `address` and reads the response head.
    pub(super) async fn get(
        self: &Arc<Self>,
        address: SocketAddr,
        request: &[u8],
    ) -> Result<Response, Failure> {
        if let Some(stream) = self.take_idle(address) {
            match exchange(stream, request).await {
                Ok(exchanged) => return Ok(self.response(address, exchanged)),
                // Closed by the target while idle, before any byte of an answer: once more on
                // a new connection.
                Err(Exchange::Stale(cause)) => {
                    tracing::trace!(%address, %cause, "an idle connection was closed; reconnecting");
                }
                Err(Exchange::Failed(failure)) => return Err(failure),
            }
        }
        let stream = self.connect(address).await?;
        match exchange(stream, request).await {
            Ok(exchanged) => Ok(self.response(address, exchanged)),
            Err(Exchange::Stale(cause)) => Err(Failure::transport(cause)),
            Err(Exchange::Failed(failure)) => Err(failure),
        }
    }

    fn response(self: &Arc<Self>, address: SocketAddr, exchanged: Exchanged) -> Response {
        let Exchanged {
            stream,
            buf,
            head,
            pos,
        } = exchanged;
        let framing = head.framing;
        Response {
            status: head.status,
            content_encoding: head.content_encoding,
            content_length: head.content_length,
            body: BodyReader {
                stream: Some(stream),
                buf,
                pos,
                framing,
                reusable: head.keep_alive,
                address,
                client: Arc::clone(self),
            },
        }
    }

    async fn connect(&self, address: SocketAddr) -> Result<TcpStream, Failure> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(address))
            .await
            .map_err(|_| {
                Failure::connect(format!(
                    "connect timed out after {:?}",
                    self.connect_timeout
                ))
            })?
            .map_err(|e| Failure::connect(format!("connect failed: {e}")))?;
        // Small writes go out at once; a failure here only costs latency.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// The most recently used idle connection to `address` that is still open.
    fn take_idle(&self, address: SocketAddr) -> Option<TcpStream> {
        let now = Instant::now();
        let mut closed = Vec::new();
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = pool.idle.get_mut(&address)?;
        let mut found = None;
        while let Some((stream, since)) = idle.pop() {
            if now.duration_since(since) < self.idle_timeout && still_open(&stream) {
                found = Some(stream);
                break;
            }
            closed.push(stream);
        }
        if idle.is_empty() {
            pool.idle.remove(&address);
        }
        drop(pool);
        drop(closed);
        found
    }

    /// Keeps `stream` for the next scrape of `address`, if the pool has room.
    fn put_idle(&self, address: SocketAddr, stream: TcpStream) {
        if self.max_idle_per_target == 0 {
            return;
        }
        let now = Instant::now();
        let mut expired = Vec::new();
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = pool.idle.entry(address).or_default();
        if idle.len() < self.max_idle_per_target {
            idle.push((stream, now));
        } else {
            expired.push(stream);
        }
        if now.duration_since(pool.last_sweep) >= SWEEP_EVERY {
            // Targets that went away leave their connections here until their idle time runs
            // out.
            pool.last_sweep = now;
            let timeout = self.idle_timeout;
            pool.idle.retain(|_, idle| {
                let (keep, old): (Vec<_>, Vec<_>) = std::mem::take(idle)
                    .into_iter()
                    .partition(|(_, since)| now.duration_since(*since) < timeout);
                expired.extend(old.into_iter().map(|(stream, _)| stream));
                *idle = keep;
                !idle.is_empty()
            });
        }
        drop(pool);
        drop(expired);
    }
}

/// Whether an idle connection is still open with nothing unread: a target that closed it, or
/// sent bytes nobody asked for, makes it unusable.
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// A response head: what the scraper needs to know before reading the body.
#[derive(Debug)]
struct Head {
    status: u16,
    content_encoding: Option<Vec<u8>>,
    content_length: Option<u64>,
    framing: Framing,
    keep_alive: bool,
}

/// How the body's end is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes are left.
    Length(u64),
    /// Chunked, at this point of a chunk.
    Chunked(Chunk),
    /// Everything until the target closes the connection.
    UntilClose,
    /// The body has been read.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// A chunk-size line comes next.
    Size,
    /// This many bytes of the chunk's data are left.
    Data(u64),
    /// The CRLF after a chunk's data comes next.
    DataEnd,
    /// The trailer section (ended by an empty line) comes next; this many bytes of it so far.
    Trailers(usize),
}

struct Exchanged {
    stream: TcpStream,
    buf: Vec<u8>,
    head: Head,
    /// Where the body starts in `buf`.
    pos: usize,
}

enum Exchange {
    /// A reused connection that the target had closed: nothing of an answer arrived.
    Stale(String),
    Failed(Failure),
}

/// Writes the request and reads the response head.
async fn exchange(mut stream: TcpStream, request: &[u8]) -> Result<Exchanged, Exchange> {
    if let Err(e) = stream.write_all(request).await {
        return Err(Exchange::Stale(format!("writing the request failed: {e}")));
    }
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BYTES);
    let mut pos = 0;
    loop {
        let parsed = match parse_head(&buf[pos..]) {
            Ok(parsed) => parsed,
            Err(cause) => return Err(Exchange::Failed(Failure::transport(cause))),
        };
        match parsed {
            Some((length, head)) if (100..200).contains(&head.status) => {
                if head.status == 101 {
                    return Err(Exchange::Failed(Failure::transport(
                        "the target switched protocols (101) on a scrape",
                    )));
                }
                // An informational head: the response follows.
                pos += length;
            }
            Some((length, head)) => {
                return Ok(Exchanged {
                    stream,
                    buf,
                    head,
                    pos: pos + length,
                });
            }
            None => {
                if buf.len() - pos >= MAX_HEAD_BYTES {
                    return Err(Exchange::Failed(Failure::transport(format!(
                        "the response head is larger than {MAX_HEAD_BYTES} bytes"
                    ))));
                }
                buf.reserve(READ_BYTES);
                match stream.read_buf(&mut buf).await {
                    Ok(0) if buf.is_empty() => {
                        return Err(Exchange::Stale(
                            "the connection closed before any response".to_owned(),
                        ));
                    }
                    Ok(0) => {
                        return Err(Exchange::Failed(Failure::transport(
                            "the connection closed in the middle of the response head",
                        )));
                    }
                    Ok(_) => {}
                    Err(e) if buf.is_empty() => {
                        return Err(Exchange::Stale(format!(
                            "reading the response failed before any byte: {e}"
                        )));
                    }
                    Err(e) => {
                        return Err(Exchange::Failed(Failure::transport(format!(
                            "reading the response head failed: {e}"
                        ))));
                    }
                }
            }
        }
    }
}

/// Parses a complete response head at the start of `bytes`: its length and what it says, or
/// `None` while incomplete.
fn parse_head(bytes: &[u8]) -> Result<Option<(usize, Head)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(format!(
                "the response head has more than {MAX_HEADERS} headers"
            ));
        }
        Err(e) => return Err(format!("the response head is malformed ({e})")),
    };
    let status = response.code.unwrap_or(0);
    let http11 = response.version == Some(1);
    let mut content_encoding = None;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut close = !http11;
    for header in response.headers.iter() {
        let name = header.name;
        let value = header.value;
        if name.eq_ignore_ascii_case("content-length") {
            let parsed = std::str::from_utf8(value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or("the response's content-length is not a number")?;
            if content_length.is_some_and(|known| known != parsed) {
                return Err("the response has two different content-length headers".to_owned());
            }
            content_length = Some(parsed);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Only `chunked`, possibly listed as `identity, chunked` by old servers.
            for coding in tokens(value) {
                if coding.eq_ignore_ascii_case(b"chunked") {
                    chunked = true;
                } else if !coding.eq_ignore_ascii_case(b"identity") {
                    return Err(
                        "the response uses a transfer-encoding other than chunked".to_owned()
                    );
                }
            }
        } else if name.eq_ignore_ascii_case("content-encoding") {
            content_encoding = Some(value.to_vec());
        } else if name.eq_ignore_ascii_case("connection") {
            for token in tokens(value) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                }
            }
        }
    }
    let framing = if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Done
    } else if chunked {
        // A length beside chunked framing is ignored (RFC 9112, 6.3), and so is the connection.
        close = close || content_length.is_some();
        content_length = None;
        Framing::Chunked(Chunk::Size)
    } else if let Some(length) = content_length {
        Framing::Length(length)
    } else {
        close = true;
        Framing::UntilClose
    };
    Ok(Some((
        length,
        Head {
            status,
            content_encoding,
            content_length,
            framing,
            keep_alive: !close,
        },
    )))
}

/// The comma-separated tokens of a header value, trimmed.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// A response whose head has been read.
pub(super) struct Response {
    /// The status code.
    pub(super) status: u16,
    /// The `Content-Encoding` header, as sent.
    pub(super) content_encoding: Option<Vec<u8>>,
    /// The body's declared length (not for a chunked body).
    pub(super) content_length: Option<u64>,
    body: BodyReader,
}

impl Response {
    /// The next piece of the body, or `None` at its end (the connection then goes back to the
    /// pool if it can be reused).
    pub(super) async fn chunk(&mut self) -> Result<Option<&[u8]>, Failure> {
        self.body.next().await
    }
}

struct BodyReader {
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    /// The first unread byte of `buf`.
    pos: usize,
    framing: Framing,
    reusable: bool,
    address: SocketAddr,
    client: Arc<Client>,
}

impl BodyReader {
    async fn next(&mut self) -> Result<Option<&[u8]>, Failure> {
        loop {
            let buffered = self.buf.len() - self.pos;
            match self.framing {
                Framing::Done => {
                    self.finish();
                    return Ok(None);
                }
                Framing::Length(0) => self.framing = Framing::Done,
                Framing::Chunked(Chunk::Data(0)) => self.framing = Framing::Chunked(Chunk::DataEnd),
                Framing::Length(left) | Framing::Chunked(Chunk::Data(left)) if buffered > 0 => {
                    let n = usize::try_from(left).map_or(buffered, |left| left.min(buffered));
                    let left = left - n as u64;
                    self.framing = match self.framing {
                        Framing::Length(_) => Framing::Length(left),
                        _ if left == 0 => Framing::Chunked(Chunk::DataEnd),
                        _ => Framing::Chunked(Chunk::Data(left)),
                    };
                    let start = self.pos;
                    self.pos += n;
                    return Ok(Some(&self.buf[start..start + n]));
                }
                Framing::Length(left) => {
                    if self.fill().await? == 0 {
                        return Err(Failure::transport(format!(
                            "the connection closed with {left} bytes of the body still to come"
                        )));
                    }
                }
                Framing::UntilClose if buffered > 0 => {
                    let start = self.pos;
                    self.pos = self.buf.len();
                    return Ok(Some(&self.buf[start..]));
                }
                Framing::UntilClose => {
                    if self.fill().await? == 0 {
                        self.reusable = false;
                        self.framing = Framing::Done;
                    }
                }
                Framing::Chunked(Chunk::Data(_)) => self.fill_or_truncated().await?,
                Framing::Chunked(Chunk::Size) => match self.line(MAX_CHUNK_LINE_BYTES)? {
                    Some(line) => {
                        let size = chunk_size(line)?;
                        self.framing = Framing::Chunked(if size == 0 {
                            Chunk::Trailers(0)
                        } else {
                            Chunk::Data(size)
                        });
                    }
                    None => self.fill_or_truncated().await?,
                },
                Framing::Chunked(Chunk::DataEnd) => match self.line(2)? {
                    Some([]) => self.framing = Framing::Chunked(Chunk::Size),
                    Some(_) => {
                        return Err(Failure::transport(
                            "a chunk's data is not followed by a line end",
                        ));
                    }
                    None => self.fill_or_truncated().await?,
                },
                Framing::Chunked(Chunk::Trailers(seen)) => {
                    let before = self.pos;
                    match self.line(MAX_TRAILER_BYTES.saturating_sub(seen))? {
                        Some([]) => self.framing = Framing::Done,
                        Some(_) => {
                            let seen = seen + (self.pos - before);
                            self.framing = Framing::Chunked(Chunk::Trailers(seen));
                        }
                        None => self.fill_or_truncated().await?,
                    }
                }
            }
        }
    }

    /// The next line (without its line end) if it is complete in the buffer, consuming it.
    fn line(&mut self, max: usize) -> Result<Option<&[u8]>, Failure> {
        let rest = &self.buf[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            if rest.len() > max {
                return Err(Failure::transport(format!(
                    "a line of the chunked body's framing is longer than {max} bytes"
                )));
            }
            return Ok(None);
        };
        if end > max {
            return Err(Failure::transport(format!(
                "a line of the chunked body's framing is longer than {max} bytes"
            )));
        }
        let start = self.pos;
        self.pos += end + 1;
        let line = &self.buf[start..start + end];
        Ok(Some(line.strip_suffix(b"\r").unwrap_or(line)))
    }

    async fn fill_or_truncated(&mut self) -> Result<(), Failure> {
        if self.fill().await? == 0 {
            return Err(Failure::transport(
                "the connection closed in the middle of a chunked body",
            ));
        }
        Ok(())
    }

    /// Reads more from the socket after the unread bytes; 0 at the end of the stream.
    async fn fill(&mut self) -> Result<usize, Failure> {
        self.buf.drain(..self.pos);
        self.pos = 0;
        self.buf.reserve(READ_BYTES);
        let Some(stream) = self.stream.as_mut() else {
            return Ok(0);
        };
        stream
            .read_buf(&mut self.buf)
            .await
            .map_err(|e| Failure::transport(format!("reading the body failed: {e}")))
    }

    /// At the body's end: the connection goes back to the pool if it can carry another scrape.
    fn finish(&mut self) {
        if let Some(stream) = self.stream.take()
            && self.reusable
            && self.pos == self.buf.len()
        {
            self.client.put_idle(self.address, stream);
        }
    }
}

/// The size of a chunk from its size line (hex digits, then optional `;extensions`).
fn chunk_size(line: &[u8]) -> Result<u64, Failure> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    let bad = || Failure::transport("a chunk size is not a hex number of at most 15 digits");
    if digits.is_empty() || digits.len() > 15 {
        return Err(bad());
    }
    let text = std::str::from_utf8(digits).map_err(|_| bad())?;
    u64::from_str_radix(text, 16).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn head(text: &str) -> Head {
        parse_head(text.as_bytes()).unwrap().unwrap().1
    }

    #[test]
    fn heads_give_framing_and_reuse() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n");
        assert_eq!(
            (h.status, h.framing, h.keep_alive),
            (200, Framing::Length(12), true)
        );
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked(Chunk::Size));
        assert!(h.keep_alive);
        let h =
            head("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive, close\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n");
        assert!(!h.keep_alive, "HTTP/1.0 is not reused");
        let h = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
        let h = head("HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Done, true));
        let h = head("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(h.content_encoding.as_deref(), Some(&b"gzip"[..]));
        // Chunked wins over a length, and such a connection is not reused.
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(
            (h.framing, h.content_length, h.keep_alive),
            (Framing::Chunked(Chunk::Size), None, false)
        );
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Len")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_heads_are_errors_that_do_not_echo_the_target() {
        let cases = [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
                "content-length is not a number",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "two different content-length",
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                "other than chunked",
            ),
            ("SECRET-TOKEN 200 OK\r\n\r\n", "malformed"),
        ];
        for (input, expected) in cases {
            let error = parse_head(input.as_bytes()).unwrap_err();
            assert!(error.contains(expected), "{input:?}: {error}");
            assert!(!error.contains("SECRET"), "{error}");
        }
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("x-{i}: y\r\n"))
            .collect();
        let error = parse_head(format!("HTTP/1.1 200 OK\r\n{many}\r\n").as_bytes()).unwrap_err();
        assert!(error.contains("more than 64 headers"), "{error}");
    }

    #[test]
    fn chunk_sizes() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"FF;name=value").unwrap(), 255);
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        for bad in [&b""[..], b"g", b"-1", b"1000000000000000", b" ;x"] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
    }

    /// A target that answers each request on a connection with the next of `answers` (raw
    /// bytes; an empty answer closes the connection once the request is read), then closes
    /// the connection; counts the connections it accepted.
    async fn raw_target(
        answers: Vec<Vec<u8>>,
    ) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answers = answers.clone();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 4096];
                    for answer in answers {
                        // One read holds the whole small request.
                        if socket.read(&mut request).await.unwrap_or(0) == 0 || answer.is_empty() {
                            return;
                        }
                        if socket.write_all(&answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (address, accepted)
    }

    async fn body(client: &Arc<Client>, address: SocketAddr) -> Result<(u16, Vec<u8>), Failure> {
        let mut response = client
            .get(address, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
            .await?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            body.extend_from_slice(chunk);
        }
        Ok((response.status, body))
    }

    #[tokio::test]
    async fn chunked_bodies_with_extensions_and_trailers_decode_and_the_connection_is_reused() {
        let chunked =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-trailer: 1\r\n\r\n"
                .to_vec();
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        let (address, accepted) = raw_target(vec![chunked, plain]).await;
        let client = Arc::new(Client::new(
            Duration::from_secs(5),
            Duration::from_secs(90),
            2,
        ));
        assert_eq!(
            body(&client, address).await.unwrap(),
            (200, b"hello world".to_vec())
        );
        assert_eq!(client.idle_count(), 1);
        assert_eq!(
            body(&client, address).await.unwrap(),
            (200, b"abc".to_vec())
        );
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one connection for both"
        );
        assert_eq!(client.idle_count(), 1);
    }

    #[tokio::test]
    async fn a_connection_the_target_closed_while_idle_is_replaced() {
        // Each connection answers once, then the target closes it.
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        let (address, accepted) = raw_target(vec![plain]).await;
        let client = Arc::new(Client::new(
            Duration::from_secs(5),
            Duration::from_secs(90),
            2,
        ));
        assert_eq!(body(&client, address).await.unwrap().1, b"abc");
        assert_eq!(client.idle_count(), 1);
        // Wait until the close has reached this side, so the idle check sees it.
        for _ in 0..200 {
            let closed = {
                let pool = client.pool.lock().unwrap();
                pool.idle
                    .get(&address)
                    .is_some_and(|idle| !still_open(&idle[0].0))
            };
            if closed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(body(&client, address).await.unwrap().1, b"abc");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_reused_connection_closed_on_the_request_is_retried_once_on_a_new_one() {
        // The first connection answers once and then closes on the next request, unanswered.
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        let (address, accepted) = raw_target(vec![plain, Vec::new()]).await;
        let client = Arc::new(Client::new(
            Duration::from_secs(5),
            Duration::from_secs(90),
            2,
        ));
        assert_eq!(body(&client, address).await.unwrap().1, b"abc");
        assert_eq!(body(&client, address).await.unwrap().1, b"abc");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A new connection that closes unanswered is an error, not a second retry.
        let (address, accepted) = raw_target(vec![Vec::new()]).await;
        let error = body(&client, address).await.unwrap_err();
        assert!(
            error.cause.contains("closed before any response"),
            "{}",
            error.cause
        );
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn truncated_and_malformed_bodies_are_errors_and_never_pooled() {
        let cases: [(&[u8], &str); 5] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
                "7 bytes of the body still to come",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
                "middle of a chunked body",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "not a hex number",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
                "not followed by a line end",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Len",
                "middle of the response head",
            ),
        ];
        for (answer, expected) in cases {
            let (address, _) = raw_target(vec![answer.to_vec()]).await;
            let client = Arc::new(Client::new(
                Duration::from_secs(5),
                Duration::from_secs(90),
                2,
            ));
            let error = body(&client, address).await.unwrap_err();
            assert!(!error.connect);
            assert!(
                error.cause.contains(expected),
                "{expected}: {}",
                error.cause
            );
            assert_eq!(client.idle_count(), 0);
        }
        // An endless chunk-size line stops at its cap.
        let mut long = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        long.extend(std::iter::repeat_n(b'0', 4096));
        let (address, _) = raw_target(vec![long]).await;
        let client = Arc::new(Client::new(
            Duration::from_secs(5),
            Duration::from_secs(90),
            2,
        ));
        let error = body(&client, address).await.unwrap_err();
        assert!(
            error.cause.contains("longer than 1024 bytes"),
            "{}",
            error.cause
        );
    }

    #[tokio::test]
    async fn a_body_until_close_is_read_whole_and_the_connection_is_not_kept() {
        let (address, _) = raw_target(vec![b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec()]).await;
        let client = Arc::new(Client::new(
            Duration::from_secs(5),
            Duration::from_secs(90),
            2,
        ));
        assert_eq!(body(&client, address).await.unwrap().1, b"until close");
        assert_eq!(client.idle_count(), 0);
    }

    #[tokio::test]
    async fn no_connection_is_kept_when_the_pool_keeps_none() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        let (address, accepted) = raw_target(vec![plain.clone(), plain]).await;
        let client = Arc::new(Client::new(
            Duration::from_secs(5),
            Duration::from_secs(90),
            0,
        ));
        body(&client, address).await.unwrap();
        body(&client, address).await.unwrap();
        assert_eq!(client.idle_count(), 0);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
