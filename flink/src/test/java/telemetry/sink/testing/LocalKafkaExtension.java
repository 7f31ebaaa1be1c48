package telemetry.sink.testing;

import java.nio.file.Path;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * One local Kafka broker for the whole test run, shared by every class that uses this extension
 * and stopped when the run ends (JUnit closes root-store resources even after failures).
 * Tests receive it as a {@link LocalKafka} parameter and isolate themselves by topic.
 */
public final class LocalKafkaExtension implements BeforeAllCallback, ParameterResolver {
    private static final ExtensionContext.Namespace NAMESPACE = ExtensionContext.Namespace.create(LocalKafkaExtension.class);

    @Override
    public void beforeAll(ExtensionContext context) {
        broker(context);
    }

    @Override
    public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
        return parameter.getParameter().getType() == LocalKafka.class;
    }

    @Override
    public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
        return broker(context);
    }

    private static LocalKafka broker(ExtensionContext context) {
        return context.getRoot().getStore(NAMESPACE)
                .getOrComputeIfAbsent("broker", key -> new Resource(), Resource.class).broker;
    }

    /** Root-store values that implement CloseableResource are closed when the run ends. */
    private static final class Resource implements ExtensionContext.Store.CloseableResource {
        final LocalKafka broker;

        Resource() {
            Path stateDir = Path.of(System.getProperty("build.dir", "target")).resolve("local-kafka");
            try {
                broker = LocalKafka.start(stateDir);
            } catch (Exception e) {
                throw new IllegalStateException("could not start the local Kafka broker: " + e.getMessage(), e);
            }
            System.out.println("local Kafka broker at " + broker.bootstrapServers());
        }

        @Override
        public void close() throws Exception {
            broker.close();
        }
    }
}
