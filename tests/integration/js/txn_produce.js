// A kafkajs 2.2.4 transactional producer: one committed transaction of COMMIT_COUNT records and
// one aborted transaction of ABORT_COUNT records, spread over the topic's PARTITIONS partitions.
// Prints {"done": true} on success.
//
// usage: node txn_produce.js BROKER TOPIC TRANSACTIONAL_ID PARTITIONS COMMIT_COUNT ABORT_COUNT
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, transactionalId, partitionsText, commitText, abortText] = process.argv.slice(2)
const partitions = parseInt(partitionsText, 10)

async function main () {
  const kafka = new Kafka({ clientId: 'sundial-kafkajs-txn', brokers: [broker], logLevel: logLevel.WARN })
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  for (const [prefix, count, commit] of [['jc', parseInt(commitText, 10), true], ['ja', parseInt(abortText, 10), false]]) {
    const txn = await producer.transaction()
    const messages = []
    for (let i = 0; i < count; i++) messages.push({ value: `${prefix}-${i}`, partition: i % partitions })
    await txn.send({ topic, messages })
    if (commit) await txn.commit()
    else await txn.abort()
  }
  await producer.disconnect()
  process.stdout.write(JSON.stringify({ done: true }) + '\n')
}

main().catch(err => { process.stderr.write(String(err && err.stack ? err.stack : err) + '\n'); process.exit(1) })
