package telemetry.localkafka;

import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;

/**
 * Kafka's own StandardAuthorizer (KRaft ACLs), minus the one shortcut MSK IAM does not offer.
 *
 * <p>Since KIP-679, Apache Kafka lets a producer without IDEMPOTENT_WRITE on the cluster
 * initialise an idempotent producer id when it may WRITE to any topic: KafkaApis'
 * handleInitProducerIdRequest (Kafka 4.1) asks authorize(IDEMPOTENT_WRITE, CLUSTER) and, failing
 * that, authorizeByResourceType(WRITE, TOPIC); that is the only caller of authorizeByResourceType.
 * The MSK Developer Guide ("Create authorization policies for the IAM role") says IAM does not
 * offer the same: "It is not possible to WriteDataIdempotently to a topic by only providing
 * WriteData access to that topic." So this broker answers that fallback with DENIED, and an
 * idempotent producer needs IDEMPOTENT_WRITE on the cluster, which is what
 * kafka-cluster:WriteDataIdempotently grants. Every other decision is StandardAuthorizer's.
 *
 * <p>The SCRAM listener's users (the device gateway) get the same answer, which is stricter than
 * MSK, where Kafka's own authorizer and its fallback decide for them: their producer (acks=1) is
 * not idempotent, so a pass here is a pass there.
 */
public class MskIamSemanticsAuthorizer extends StandardAuthorizer {
    @Override
    public AuthorizationResult authorizeByResourceType(
            AuthorizableRequestContext context, AclOperation operation, ResourceType resourceType) {
        if (operation == AclOperation.WRITE && resourceType == ResourceType.TOPIC) {
            return AuthorizationResult.DENIED;
        }
        return super.authorizeByResourceType(context, operation, resourceType);
    }
}
