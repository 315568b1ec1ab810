package cloudpeers;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitter;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitterFactory;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.spark.internal.io.FileCommitProtocol;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Job commit through Spark's binding for Hadoop's committers, over Hadoop's own connector, as
 * Spark's SQL writer drives it: {@code FileCommitProtocol.instantiate} of the protocol class
 * ({@code PathOutputCommitProtocol}), whose committer comes from the factory the Hadoop
 * configuration names for the destination's scheme ({@code ManifestCommitterFactory}, or on
 * abfs Hadoop's {@code AzureManifestCommitterFactory}); {@code setupJob}, then {@code commitJob}.
 *
 * <p>One JSON object a line on standard output; the parent answers on standard input:
 * <ol>
 * <li>with {@code --warmup-dest}, a small job written and committed there first, untimed: each
 *   task's files written through the connector ({@code newTaskTempFile}), Hadoop's own task
 *   commit, then job commit; class loading, JIT and the connector's connections are then warm,
 *   as in a driver that has written before. Its manifests are kept ({@code
 *   mapreduce.manifest.committer.diagnostics.manifest.directory}) and the first is printed:
 *   what Hadoop's task commit writes on this store;</li>
 * <li>{@code setupJob} of the timed job; prints {@code {"ready": ..., "attempt_dir": ...}} and
 *   waits for a line: the parent puts the tasks' files and manifests into the account;</li>
 * <li>{@code commitJob}, timed, with the JVM's CPU ({@code getProcessCpuTime}: every thread)
 *   and garbage collection; then, untimed, {@code _SUCCESS} read back through the connector;
 *   prints the result and exits.</li>
 * </ol>
 *
 * <pre>
 * java cloudpeers.ConnectorDriver --dest URI --job-id UUID --conf FILE.json
 *     [--protocol CLASS] [--warmup-dest URI --warmup-tasks 4 --warmup-files 100]
 * </pre>
 */
public final class ConnectorDriver {
    static final String WRITE_UUID = "spark.sql.sources.writeJobUUID";
    static final String DIAGNOSTICS = "mapreduce.manifest.committer.diagnostics.manifest.directory";
    static final String PATH_PROTOCOL = "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol";
    private static final ObjectMapper JSON = new ObjectMapper();

    private ConnectorDriver() {
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        Map<String, String> keys = JSON.readValue(Files.readAllBytes(Paths.get(required(a, "conf"))),
            new TypeReference<Map<String, String>>() { });
        String protocolClass = a.getOrDefault("protocol", PATH_PROTOCOL);
        Configuration conf = new Configuration();
        for (Map.Entry<String, String> e : keys.entrySet()) {
            conf.set(e.getKey(), e.getValue());
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

        String warmDest = a.get("warmup-dest");
        if (warmDest != null) {
            Map<String, Object> warm = warmUp(conf, protocolClass, new Path(warmDest),
                Integer.parseInt(a.getOrDefault("warmup-tasks", "4")),
                Integer.parseInt(a.getOrDefault("warmup-files", "100")));
            emit(warm);
        }

        Path dest = new Path(required(a, "dest"));
        String jobId = required(a, "job-id");
        Job job = newJob(conf, dest, jobId);
        FileCommitProtocol protocol = FileCommitProtocol.instantiate(protocolClass, jobId,
            dest.toString(), false);
        protocol.setupJob(job);
        Map<String, Object> ready = new LinkedHashMap<>();
        ready.put("ready", true);
        // Hadoop's job attempt directory: <dest>/_temporary/<jobId>/<attempt %02d>
        int attempt = job.getConfiguration().getInt("mapreduce.job.application.attempt.id", 0);
        ready.put("attempt_dir", new Path(new Path(new Path(dest, "_temporary"), jobId),
            String.format("%02d", attempt)).toString());
        emit(ready);
        String go = in.readLine();
        if (go == null) {
            throw new IOException("the parent closed standard input before the commit");
        }

        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long gc0 = gcMillis();
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        protocol.commitJob(job, seq(new ArrayList<>()));
        long t1 = System.nanoTime();
        long cpu1 = os.getProcessCpuTime();
        long gc1 = gcMillis();

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("wall_s", (t1 - t0) / 1e9);
        out.put("process_cpu_s", (cpu1 - cpu0) / 1e9);
        out.put("gc_s", (gc1 - gc0) / 1e3);
        out.put("protocol", protocol.getClass().getName());
        out.put("committer_factory", conf.get("mapreduce.outputcommitter.factory.scheme."
            + dest.toUri().getScheme()));
        out.put("available_processors", Runtime.getRuntime().availableProcessors());
        out.put("success", readJson(dest.getFileSystem(conf), new Path(dest, "_SUCCESS")));
        emit(out);
        // the connectors' pools keep non-daemon threads: without this the JVM never ends
        System.exit(0);
    }

    /** A Hadoop job as Spark's SQL writer sets one up (FileFormatWriter). */
    private static Job newJob(Configuration base, Path dest, String jobId) throws IOException {
        Job job = Job.getInstance(new Configuration(base));
        job.setOutputKeyClass(Void.class);
        job.getConfiguration().set(WRITE_UUID, jobId);
        FileOutputFormat.setOutputPath(job, dest);
        return job;
    }

    /** A small job written through the connector and committed, untimed. */
    private static Map<String, Object> warmUp(Configuration conf, String protocolClass, Path dest,
                                              int tasks, int files) throws Exception {
        String jobId = UUID.randomUUID().toString();
        Configuration warmConf = new Configuration(conf);
        Path kept = new Path(dest.getParent(), dest.getName() + "-manifests");
        warmConf.set(DIAGNOSTICS, kept.toString());
        // Hadoop renames the manifests' directory into it: its parent must exist
        kept.getFileSystem(conf).mkdirs(kept);
        Job job = newJob(warmConf, dest, jobId);
        FileCommitProtocol protocol = FileCommitProtocol.instantiate(protocolClass, jobId,
            dest.toString(), false);
        long t0 = System.nanoTime();
        protocol.setupJob(job);
        JobID hadoopJob = new JobID("20261128", 7);
        byte[] data = "warm-up\n".getBytes(StandardCharsets.UTF_8);
        for (int t = 0; t < tasks; t++) {
            // the task side as the protocol runs it on an executor (setupTask, files under
            // the committer's work path, commitTask), without Spark's commit coordinator
            TaskAttemptID attempt = new TaskAttemptID(new TaskID(hadoopJob, TaskType.MAP, t), 0);
            Configuration taskConf = new Configuration(job.getConfiguration());
            taskConf.set("mapreduce.task.attempt.id", attempt.toString());
            TaskAttemptContext ctx = new TaskAttemptContextImpl(taskConf, attempt);
            PathOutputCommitter committer = PathOutputCommitterFactory.createCommitter(dest, ctx);
            committer.setupTask(ctx);
            for (int i = t; i < files; i += tasks) {
                Path path = new Path(committer.getWorkPath(),
                    String.format("p=%04d/part-%05d-%05d.bin", i % 10, t, i));
                try (OutputStream o = path.getFileSystem(taskConf).create(path, false)) {
                    o.write(data);
                }
            }
            if (committer.needsTaskCommit(ctx)) {
                committer.commitTask(ctx);
            }
        }
        protocol.commitJob(job, seq(new ArrayList<>()));
        double took = (System.nanoTime() - t0) / 1e9;
        FileSystem fs = kept.getFileSystem(conf);
        Object manifest = null;
        int manifests = 0;
        for (FileStatus st : fs.listStatus(new Path(kept, jobId))) {
            if (manifest == null) {
                manifest = readJson(fs, st.getPath());
            }
            manifests++;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("warmup_s", took);
        out.put("warmup_files", files);
        out.put("warmup_manifests", manifests);
        out.put("warmup_manifest", manifest);
        out.put("warmup_success", readJson(fs, new Path(dest, "_SUCCESS")));
        return out;
    }

    private static Seq<FileCommitProtocol.TaskCommitMessage> seq(
            List<FileCommitProtocol.TaskCommitMessage> messages) {
        return CollectionConverters.asScala(messages).toList();
    }

    private static Object readJson(FileSystem fs, Path path) throws IOException {
        try (FSDataInputStream in = fs.open(path)) {
            return JSON.readValue((InputStream) in, Object.class);
        }
    }

    private static long gcMillis() {
        long total = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            total += Math.max(0, gc.getCollectionTime());
        }
        return total;
    }

    private static void emit(Map<String, Object> line) throws IOException {
        System.out.println(JSON.writeValueAsString(line));
        System.out.flush();
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new LinkedHashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value pairs, got " + argv[i]);
            }
            out.put(argv[i].substring(2), argv[++i]);
        }
        return out;
    }

    private static String required(Map<String, String> a, String name) {
        String v = a.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }
}
