package esrc.example;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Reads the events esrc forwarded to a topic, as any downstream service
 * would: a read_committed consumer (esrc writes with a transactional
 * producer, so aborted attempts stay invisible), key = stream name, value =
 * the event's data, CloudEvents 1.0 binary-mode headers for the rest.
 * A tombstone (esrc.erase_stream's esrc.erased, esrc.delete_stream's
 * esrc.deleted: ce_type says which) has a null value and no content-type:
 * the stream was erased or deleted, and whatever this consumer derived from
 * the stream's earlier records should go too (a compacted topic drops
 * them). It is the stream's next version like any event.
 *
 * Usage: UserEventsConsumer BROKERS TOPIC EXPECTED_COUNT [TIMEOUT_SECONDS]
 *
 * Prints one line per event (with the W3C trace context headers
 * ce_traceparent and ce_tracestate, "-" when absent: an OpenTelemetry
 * consumer would continue that trace) and exits 0 once EXPECTED_COUNT events were
 * read with all required headers and each stream's versions in order;
 * exits 1 otherwise.
 */
public final class UserEventsConsumer {
    private static final String[] REQUIRED = {
        "ce_specversion", "ce_id", "ce_type", "ce_source", "ce_time",
        "ce_esrcstream", "ce_esrcversion", "ce_esrcposition"
    };

    public static void main(String[] args) {
        if (args.length < 3) {
            System.err.println("usage: UserEventsConsumer BROKERS TOPIC EXPECTED_COUNT [TIMEOUT_SECONDS]");
            System.exit(2);
        }
        String brokers = args[0];
        String topic = args[1];
        int expected = Integer.parseInt(args[2]);
        long timeoutMs = 1000L * (args.length > 3 ? Integer.parseInt(args[3]) : 60);

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, "esrc-java-example-" + System.nanoTime());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());

        List<String> problems = new ArrayList<>();
        Map<String, Long> lastVersion = new LinkedHashMap<>();
        int count = 0;
        int tombstones = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (count < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> rec : consumer.poll(Duration.ofMillis(500))) {
                    count++;
                    Map<String, String> h = new LinkedHashMap<>();
                    for (Header header : rec.headers()) {
                        h.put(header.key(), header.value() == null ? null
                                : new String(header.value(), StandardCharsets.UTF_8));
                    }
                    for (String name : REQUIRED) {
                        if (!h.containsKey(name)) {
                            problems.add("offset " + rec.offset() + ": header " + name + " missing");
                        }
                    }
                    boolean tombstone = rec.value() == null;
                    if (tombstone) {
                        tombstones++;
                    }
                    String type = h.getOrDefault("ce_type", "");
                    if (tombstone != (type.equals("esrc.erased") || type.equals("esrc.deleted"))) {
                        problems.add("offset " + rec.offset() + ": type " + type
                                + (tombstone ? " with a null value" : " with a value"));
                    }
                    if (!tombstone && !h.containsKey("content-type")) {
                        problems.add("offset " + rec.offset() + ": header content-type missing");
                    }
                    if (!rec.key().equals(h.get("ce_esrcstream"))) {
                        problems.add("offset " + rec.offset() + ": key is not the stream");
                    }
                    long version = Long.parseLong(h.getOrDefault("ce_esrcversion", "-1"));
                    Long previous = lastVersion.put(rec.key(), version);
                    if (previous != null && version != previous + 1) {
                        problems.add(rec.key() + ": version " + version + " after " + previous);
                    }
                    System.out.printf("partition=%d offset=%d key=%s version=%d type=%s id=%s time=%s"
                            + " traceparent=%s tracestate=%s value=%s%n",
                            rec.partition(), rec.offset(), rec.key(), version, h.get("ce_type"),
                            h.get("ce_id"), h.get("ce_time"), h.getOrDefault("ce_traceparent", "-"),
                            h.getOrDefault("ce_tracestate", "-"), rec.value());
                }
            }
        }
        if (count != expected) {
            problems.add("read " + count + " events, expected " + expected);
        }
        if (!problems.isEmpty()) {
            problems.forEach(p -> System.err.println("java consumer: " + p));
            System.exit(1);
        }
        System.out.println("java consumer: " + count + " events (" + tombstones + " tombstones), headers complete,"
                + " per-stream versions in order");
    }
}
