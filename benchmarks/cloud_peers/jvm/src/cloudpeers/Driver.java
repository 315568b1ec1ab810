package cloudpeers;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.statistics.IOStatisticsSnapshot;
import org.apache.hadoop.fs.statistics.MeanStatistic;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitterConstants;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.ManifestSuccessData;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;

/**
 * Commits one job with Hadoop's ManifestCommitter on {@link SimAbfsFileSystem}, timing job
 * commit only, and prints the result as one JSON line.
 *
 * <p>Set-up (untimed, service model off): job set-up; then each task attempt's set-up, its
 * files written straight to the local disk behind its work directory (empty files named as
 * the cloud-scale benchmark names them, {@code p=<k>/part-<task>-<i>.parquet}, spread over
 * the partitions), and Hadoop's own task commit (scan, manifest save) through the FileSystem.
 * Before it, unless {@code --warmup-files 0}, a small job is committed the same way (model
 * on, counts then reset), so the timed commit runs in a warm JVM. Timed, with the model on:
 * {@code commitJob} of the job's committer.
 *
 * <pre>
 * java cloudpeers.Driver --root DIR --files N --tasks T --partitions P [--latency-ms 20]
 *   [--p99-ms 200] [--ops-limit 0] [--burst-s 0.25] [--threads 32] [--rate-limit 1000]
 *   [--seed 1] [--prep-threads 2] [--warmup-files 500] [--service adls|blob|gcs] [--out FILE]
 * </pre>
 */
public final class Driver {
    private static final String ACCOUNT = "account";
    private static final String TABLE = "/table";

    private Driver() {
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        String rootDir = required(a, "root");
        int files = Integer.parseInt(required(a, "files"));
        int tasks = Integer.parseInt(required(a, "tasks"));
        int partitions = Integer.parseInt(required(a, "partitions"));
        double latencyMs = Double.parseDouble(a.getOrDefault("latency-ms", "20"));
        double p99Ms = Double.parseDouble(a.getOrDefault("p99-ms", "200"));
        double opsLimit = Double.parseDouble(a.getOrDefault("ops-limit", "0"));
        double burstS = Double.parseDouble(a.getOrDefault("burst-s", "0.25"));
        int threads = Integer.parseInt(a.getOrDefault("threads",
            String.valueOf(ManifestCommitterConstants.OPT_IO_PROCESSORS_DEFAULT)));
        int rateLimit = Integer.parseInt(a.getOrDefault("rate-limit",
            String.valueOf(SimAbfsFileSystem.RATE_LIMIT_DEFAULT)));
        long seed = Long.parseLong(a.getOrDefault("seed", "1"));
        int prepThreads = Integer.parseInt(a.getOrDefault("prep-threads", "2"));
        String service = a.getOrDefault("service", "adls");
        if (!SimAbfsFileSystem.SERVICES.contains(service)) {
            throw new IllegalArgumentException("--service: expected one of "
                + SimAbfsFileSystem.SERVICES + ", got " + service);
        }
        if (files < 1 || tasks < 1 || partitions < 1 || tasks > files || threads < 1
            || rateLimit < 0 || prepThreads < 1) {
            throw new IllegalArgumentException("need files >= tasks >= 1, partitions >= 1, "
                + "threads >= 1, rate-limit >= 0, prep-threads >= 1");
        }

        ServiceModel model = ServiceModel.INSTANCE;
        // the warm-up sees the latency but not the account limit (it is not measured)
        model.configure(latencyMs, p99Ms, 0, burstS, seed);
        model.setEnabled(false);

        Configuration conf = new Configuration();
        conf.set("fs." + SimAbfsFileSystem.SCHEME + ".impl", SimAbfsFileSystem.class.getName());
        conf.set(SimAbfsFileSystem.ROOT_KEY, rootDir);
        conf.setInt(SimAbfsFileSystem.RATE_LIMIT_KEY, rateLimit);
        conf.set(SimAbfsFileSystem.SERVICE_KEY, service);
        conf.setInt(ManifestCommitterConstants.OPT_IO_PROCESSORS, threads);
        Path dest = new Path(SimAbfsFileSystem.SCHEME + "://" + ACCOUNT + TABLE);
        SimAbfsFileSystem fs = (SimAbfsFileSystem) FileSystem.get(dest.toUri(), conf);
        java.nio.file.Path localDest = fs.localPath(dest);
        if (Files.exists(localDest)) {
            throw new IOException(localDest + " exists: the driver needs a fresh root");
        }

        int warmupFiles = Integer.parseInt(a.getOrDefault("warmup-files", "500"));
        long prepStart = System.nanoTime();
        if (warmupFiles > 0) {
            // an untimed small job first, in the same JVM, through the model: class loading,
            // JIT and thread pools are then warm, as in a driver that has committed before
            Path warm = new Path(SimAbfsFileSystem.SCHEME + "://" + ACCOUNT + "/warmup");
            JobID warmId = new JobID("20261127", 0);
            TaskAttemptContext warmContext = jobContext(conf, warmId);
            TimelineCommitter warmCommitter = new TimelineCommitter(warm, warmContext);
            warmCommitter.setupJob(warmContext);
            writeAndCommitTasks(fs, conf, warm, warmId, warmupFiles,
                Math.min(10, warmupFiles), Math.min(partitions, warmupFiles), prepThreads);
            model.setEnabled(true);
            warmCommitter.commitJob(warmContext);
            model.setEnabled(false);
            fs.delete(warm, true);
            fs.emptyTrash();
        }
        JobID jobId = new JobID("20261127", 1);
        TaskAttemptContext jobContext = jobContext(conf, jobId);
        TimelineCommitter jobCommitter = new TimelineCommitter(dest, jobContext);
        jobCommitter.setupJob(jobContext);
        writeAndCommitTasks(fs, conf, dest, jobId, files, tasks, partitions, prepThreads);
        double prepS = (System.nanoTime() - prepStart) / 1e9;

        System.gc();
        model.configure(latencyMs, p99Ms, opsLimit, burstS, seed);
        model.reset();
        SimAbfsFileSystem.resetRenameWait();
        model.setEnabled(true);
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        jobCommitter.startTimeline();
        long t0 = System.nanoTime();
        jobCommitter.commitJob(jobContext);
        long t1 = System.nanoTime();
        long cpu1 = os.getProcessCpuTime();
        model.setEnabled(false);
        fs.emptyTrash();

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("peer", "hadoop-manifest");
        out.put("service", service);
        out.put("files", files);
        out.put("tasks", tasks);
        out.put("partitions", partitions);
        out.put("io_threads", threads);
        out.put("rate_limit", rateLimit);
        out.put("latency_ms", latencyMs);
        out.put("p99_ms", p99Ms);
        out.put("ops_limit", opsLimit);
        out.put("burst_s", burstS);
        out.put("warmup_files", warmupFiles);
        out.put("prepare_s", prepS);
        out.put("wall_s", (t1 - t0) / 1e9);
        out.put("files_per_s", files / ((t1 - t0) / 1e9));
        // served, as the simulator counts them; sent = served + throttled answers
        out.put("requests", model.requestTotal() - model.throttledTotal());
        out.put("throttled", model.throttledTotal());
        out.put("requests_sent", model.requestTotal());
        out.put("requests_sent_by_op", model.requestCounts());
        out.put("retry_backoff_s", model.backoffSeconds());
        out.put("rename_rate_limit_wait_s", SimAbfsFileSystem.renameWaitSeconds());
        out.put("process_cpu_s", (cpu1 - cpu0) / 1e9);
        out.put("available_processors", Runtime.getRuntime().availableProcessors());
        out.put("stage_timeline", jobCommitter.timeline());
        ManifestSuccessData success = jobCommitter.getSuccessReport();
        if (success != null) {
            out.put("success_state", success.getState());
            out.put("committer_metrics", success.getMetrics());
            IOStatisticsSnapshot stats = success.getIOStatistics();
            Map<String, Double> stageSeconds = new TreeMap<>();
            for (Map.Entry<String, MeanStatistic> e : stats.meanStatistics().entrySet()) {
                String key = e.getKey();
                if (key.startsWith("job_stage_") && key.endsWith(".mean")
                    && !key.contains(".failures")) {
                    stageSeconds.put(key.substring(0, key.length() - ".mean".length()),
                        e.getValue().getSum() / 1000.0);
                }
            }
            out.put("stage_durations_s", stageSeconds);
            out.put("hadoop_counters", new TreeMap<>(stats.counters()));
        }
        out.putAll(checkDestination(localDest));

        ObjectMapper json = new ObjectMapper().disable(SerializationFeature.INDENT_OUTPUT);
        String text = json.writeValueAsString(out);
        String outFile = a.get("out");
        if (outFile != null) {
            Files.write(java.nio.file.Paths.get(outFile), text.getBytes(StandardCharsets.UTF_8));
        }
        System.out.println(text);
        System.out.flush();
        fs.close();
    }

    private static TaskAttemptContext jobContext(Configuration conf, JobID jobId) {
        return new TaskAttemptContextImpl(conf,
            new TaskAttemptID(new TaskID(jobId, TaskType.JOB_SETUP, 0), 0));
    }

    /** Task attempts: set-up, files on the local disk behind the work path, task commit. */
    private static void writeAndCommitTasks(SimAbfsFileSystem fs, Configuration conf, Path dest,
                                            JobID jobId, int files, int tasks, int partitions,
                                            int prepThreads) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(prepThreads);
        try {
            List<Future<?>> done = new ArrayList<>();
            long first = 0;
            for (int t = 0; t < tasks; t++) {
                final int task = t;
                final int count = files / tasks + (t < files % tasks ? 1 : 0);
                final long start = first;
                first += count;
                done.add(pool.submit(() -> {
                    TaskAttemptContext ctx = new TaskAttemptContextImpl(conf,
                        new TaskAttemptID(new TaskID(jobId, TaskType.MAP, task), 0));
                    ManifestCommitter committer = new ManifestCommitter(dest, ctx);
                    committer.setupTask(ctx);
                    java.nio.file.Path work = fs.localPath(committer.getWorkPath());
                    Map<Integer, java.nio.file.Path> dirs = new HashMap<>();
                    for (int i = 0; i < count; i++) {
                        int part = (int) ((start + i) % partitions);
                        java.nio.file.Path dir = dirs.get(part);
                        if (dir == null) {
                            dir = work.resolve(String.format("p=%04d", part));
                            Files.createDirectories(dir);
                            dirs.put(part, dir);
                        }
                        Files.createFile(dir.resolve(
                            String.format("part-%05d-%05d.parquet", task, i)));
                    }
                    committer.commitTask(ctx);
                    return null;
                }));
            }
            for (Future<?> f : done) {
                f.get();
            }
        } finally {
            pool.shutdownNow();
        }
    }

    /** What the destination holds: files outside _temporary, and whether _SUCCESS is there. */
    private static Map<String, Object> checkDestination(java.nio.file.Path localDest)
            throws IOException {
        AtomicLong count = new AtomicLong();
        java.nio.file.Path temporary = localDest.resolve("_temporary");
        Files.walkFileTree(localDest, new SimpleFileVisitor<java.nio.file.Path>() {
            @Override
            public FileVisitResult preVisitDirectory(java.nio.file.Path dir,
                                                     BasicFileAttributes attrs) {
                return dir.equals(temporary) ? FileVisitResult.SKIP_SUBTREE
                    : FileVisitResult.CONTINUE;
            }

            @Override
            public FileVisitResult visitFile(java.nio.file.Path file, BasicFileAttributes attrs) {
                if (!file.getParent().equals(localDest)) {
                    count.incrementAndGet();
                }
                return FileVisitResult.CONTINUE;
            }
        });
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("dest_files", count.get());
        out.put("success_written", Files.isRegularFile(localDest.resolve("_SUCCESS")));
        out.put("temporary_left", Files.exists(temporary));
        return out;
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value pairs, got "
                    + argv[i]);
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
