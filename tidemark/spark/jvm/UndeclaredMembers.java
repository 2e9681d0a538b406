package tidemark.jvm;

import org.apache.spark.sql.api.java.UDF2;

/**
 * The undeclared top-level properties of a document that {@link PlainDocument} proved plain
 * under an open spec (its result has {@code PlainDocument.UNDECLARED} set): {@code "name"}
 * U+0000 the value's JSON text, separated by U+0001, for {@code str_to_map}; null where there
 * are none.  The combine carries them to the reduced document, the later document's value
 * winning per name (lastWriteWins, as the Python fold reduces a property its schema does not
 * declare).
 */
public final class UndeclaredMembers implements UDF2<String, String, String> {
    private static final long serialVersionUID = 1L;
    private final PlainDocument scanner = new PlainDocument();

    @Override
    public String call(String text, String spec) {
        return scanner.undeclared(text, spec);
    }
}
