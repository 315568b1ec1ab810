package cloudpeers;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter;

/** Hadoop's ManifestCommitter, noting when each of its stages starts and ends. */
public class TimelineCommitter extends ManifestCommitter {
    private final List<Map<String, Object>> events = new ArrayList<>();
    private volatile long originNs = -1;

    public TimelineCommitter(Path outputPath, TaskAttemptContext context) throws IOException {
        super(outputPath, context);
    }

    /** Start recording, times relative to now. */
    void startTimeline() {
        synchronized (events) {
            events.clear();
        }
        originNs = System.nanoTime();
    }

    private void note(String what, String stage) {
        long origin = originNs;
        if (origin < 0) {
            return;
        }
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("event", what);
        e.put("stage", stage);
        e.put("t_s", (System.nanoTime() - origin) / 1e9);
        synchronized (events) {
            events.add(e);
        }
    }

    @Override
    public void enterStage(String stage) {
        note("enter", stage);
        super.enterStage(stage);
    }

    @Override
    public void exitStage(String stage) {
        note("exit", stage);
        super.exitStage(stage);
    }

    /** The stages as {stage, start_s, end_s}, in order of start. */
    List<Map<String, Object>> timeline() {
        List<Map<String, Object>> out = new ArrayList<>();
        // a stage may be entered again before it exits (commit job wraps its sub-stages):
        // each exit closes the latest open entry of its name
        Map<String, java.util.ArrayDeque<Map<String, Object>>> open = new LinkedHashMap<>();
        synchronized (events) {
            for (Map<String, Object> e : events) {
                String stage = (String) e.get("stage");
                if ("enter".equals(e.get("event"))) {
                    Map<String, Object> s = new LinkedHashMap<>();
                    s.put("stage", stage);
                    s.put("start_s", e.get("t_s"));
                    s.put("end_s", null);
                    out.add(s);
                    open.computeIfAbsent(stage, k -> new java.util.ArrayDeque<>()).push(s);
                } else {
                    java.util.ArrayDeque<Map<String, Object>> stack = open.get(stage);
                    Map<String, Object> s = stack == null ? null : stack.poll();
                    if (s != null) {
                        s.put("end_s", e.get("t_s"));
                    }
                }
            }
        }
        return out;
    }
}
