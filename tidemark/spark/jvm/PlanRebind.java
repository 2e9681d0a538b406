package tidemark.jvm;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A batch's analyzed plan from a template: the plan that tidemark built and Spark analyzed
 * for an earlier batch of the same query, with that batch's source leaf replaced by this
 * batch's.  A {@code foreachBatch} DataFrame is a {@code LogicalRDD} whose output attributes
 * are the query's own, the same in every batch, so nothing above the leaf changes: the
 * result is marked analyzed, and a batch's plan costs no analysis (0.1-0.3 s of it with
 * the compiled combine's expressions).
 */
public final class PlanRebind {
    private PlanRebind() {}

    /**
     * {@code template} with {@code leaf} (by reference) replaced by {@code batch}; null when
     * the two leaves differ in class or output, or {@code leaf} does not occur exactly once.
     */
    public static LogicalPlan rebind(LogicalPlan template, LogicalPlan leaf, LogicalPlan batch) {
        if (!leaf.getClass().equals(batch.getClass()) || !leaf.output().equals(batch.output())) {
            return null;
        }
        int[] found = {0};
        LogicalPlan out = replace(template, leaf, batch, found);
        if (found[0] != 1) {
            return null;
        }
        out.setAnalyzed();
        return out;
    }

    private static LogicalPlan replace(LogicalPlan plan, LogicalPlan leaf, LogicalPlan batch, int[] found) {
        if (plan == leaf) {
            found[0]++;
            return batch;
        }
        scala.collection.immutable.Seq<LogicalPlan> children = plan.children();
        if (children.isEmpty()) {
            return plan;
        }
        List<LogicalPlan> out = new ArrayList<>(children.size());
        boolean changed = false;
        Iterator<LogicalPlan> it = children.iterator();
        while (it.hasNext()) {
            LogicalPlan child = it.next();
            LogicalPlan next = replace(child, leaf, batch, found);
            changed |= next != child;
            out.add(next);
        }
        return changed ? (LogicalPlan) plan.withNewChildren(CollectionConverters.asScala(out).toSeq()) : plan;
    }
}
