// Consume `count` records of `topic` in consumer group `group` with kafkajs 2.2.4,
// committing each processed record's offset + 1 explicitly, then leave the group.
// Prints one JSON line per processed record: {"partition": p, "offset": o, "value": "..."},
// and a final {"done": true, "committed": {...}} line.
//
// usage: node group_consume.js BROKER TOPIC GROUP COUNT [TIMEOUT_MS]
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, groupId, countText, timeoutText] = process.argv.slice(2)
const wanted = parseInt(countText, 10)
const timeoutMs = parseInt(timeoutText || '60000', 10)

async function main () {
  const kafka = new Kafka({ clientId: 'sundial-kafkajs', brokers: [broker], logLevel: logLevel.WARN })
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 6000,
    heartbeatInterval: 500,
    rebalanceTimeout: 10000,
    maxWaitTimeInMs: 100
  })
  let processed = 0
  const committed = {}
  let finish
  const finished = new Promise(resolve => { finish = resolve })
  const timer = setTimeout(() => finish('timeout'), timeoutMs)
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic: t, partition, message }) => {
      if (processed >= wanted) return
      processed += 1
      const next = (BigInt(message.offset) + 1n).toString()
      await consumer.commitOffsets([{ topic: t, partition, offset: next }])
      committed[partition] = next
      process.stdout.write(JSON.stringify({ partition, offset: Number(message.offset), value: message.value.toString() }) + '\n')
      if (processed >= wanted) finish('done')
    }
  })
  const how = await finished
  clearTimeout(timer)
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ done: how === 'done', committed }) + '\n')
  process.exit(how === 'done' ? 0 : 3)
}

main().catch(err => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n')
  process.exit(2)
})
